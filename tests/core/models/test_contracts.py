"""Every bi-encoder and reranker the code passes around follows its declared contract
(:mod:`samelang.core.models.contracts`): the instances pass ``isinstance`` against the runtime-checkable
protocol, and every class that defines a contract's method takes the protocol's parameters, so a
wrapper can never drift from what it wraps."""

from __future__ import annotations

import inspect

import pytest

from samelang.core.models.contracts import Capabilities, Reranker, TextEncoder, check_capabilities
from samelang.core.models.cross_encoder import CosineReranker, CrossEncoderReranker
from samelang.core.models.encoder import Encoder
from samelang.core.models.fused import FusedEncoder
from samelang.core.runtime.engine import Backend, OnnxBackend, TorchBackend
from samelang.evaluation.cached_models import CachedReranker, MemoEncoder
from samelang.service.batching import BatchedEncoder, BatchedReranker

ENCODERS = [Encoder, FusedEncoder, BatchedEncoder, MemoEncoder]
RERANKERS = [CrossEncoderReranker, CosineReranker, BatchedReranker, CachedReranker]


def _methods(protocol) -> dict:
    return {
        name: member
        for name, member in vars(protocol).items()
        if callable(member) and (name == "__call__" or not name.startswith("_")) and not isinstance(member, property)
    }


def _parameters(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()]


BACKENDS = [OnnxBackend, TorchBackend]
PAIRS = [(c, TextEncoder) for c in ENCODERS] + [(c, Reranker) for c in RERANKERS] + [(c, Backend) for c in BACKENDS]


@pytest.mark.parametrize(("cls", "protocol"), PAIRS)
def test_each_implementation_takes_the_declared_parameters(cls, protocol):
    checked = 0
    for name, declared in _methods(protocol).items():
        own = inspect.getattr_static(cls, name, None)
        if own is None:  # a wrapper that forwards it (``__getattr__``) to what it wraps
            assert "__getattr__" in vars(cls), f"{cls.__name__} has no {name} and forwards nothing"
            continue
        fn = own.__func__ if isinstance(own, staticmethod | classmethod) else own
        assert _parameters(fn) == _parameters(declared), (cls.__name__, name)
        checked += 1
    assert checked, f"{cls.__name__} defines none of {protocol.__name__}'s methods"


def test_the_served_and_evaluated_variants_are_instances(encoder):
    """Real objects over the real base model: the plain encoder, its micro-batched and memoised wrappers,
    the cosine reranker and its score cache."""
    batched = BatchedEncoder(encoder, max_wait_ms=1.0, max_items=4)
    try:
        encoders = [encoder, batched, MemoEncoder(encoder, {})]
        assert all(isinstance(e, TextEncoder) for e in encoders)
        vectors = [e.encode_queries(["Where is the V&A?"]) for e in encoders]
        assert all(v.shape == (1, encoder.dim) for v in vectors)
    finally:
        batched.batcher.close()
    rerankers = [CosineReranker(encoder), CachedReranker(CosineReranker(encoder), None)]
    assert all(isinstance(r, Reranker) for r in rerankers)
    scores = [r.score("Where is the V&A?", ["The V&A is in London.", "Paris."]) for r in rerankers]
    assert all(len(s) == 2 and s[0] > s[1] for s in scores)
    assert not isinstance(object(), TextEncoder) and not isinstance(encoder, Reranker)
    assert isinstance(encoder.engine.backend, Backend)


def test_every_model_declares_what_it_can_do_and_has_it(encoder, tmp_path):
    """Each implementation declares its :class:`Capabilities` (wrappers forward the one they wrap), and
    :func:`check_capabilities` (what the loader runs) passes on real objects and names what a false
    declaration lacks."""
    from samelang.core.models.fused import FusionConfig
    from samelang.core.models.generation import NoGenerator, OpenAIGenerator

    fused = FusedEncoder(tmp_path, encoder, encoder, FusionConfig())
    batched = BatchedEncoder(encoder, max_wait_ms=1.0, max_items=4)
    try:
        for model in (encoder, fused, batched, MemoEncoder(fused, {})):
            check_capabilities(model, "bi-encoder")
        assert [m.capabilities.fused for m in (encoder, fused, batched, MemoEncoder(fused, {}))] == [
            False, True, False, True]  # fmt: skip
    finally:
        batched.batcher.close()
    cosine = CosineReranker(encoder)
    for model in (cosine, CachedReranker(cosine, None)):
        check_capabilities(model, "reranker")
    assert cosine.capabilities.scores_vectors and not CachedReranker(cosine, None).capabilities.scores_vectors
    assert CrossEncoderReranker.capabilities.scores_pairs
    check_capabilities(NoGenerator(), "generator")
    assert not NoGenerator.capabilities.generates and OpenAIGenerator.capabilities.generates

    class Liar:
        capabilities = Capabilities(scores_pairs=True)

    with pytest.raises(TypeError, match="declares scores_pairs but has no score_pairs"):
        check_capabilities(Liar(), "reranker")
    with pytest.raises(TypeError, match="declares no capabilities"):
        check_capabilities(object(), "generator")

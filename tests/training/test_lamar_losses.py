"""LAMAR's stage-2 losses on hand-computed cases (seed 002, equations 4-6)."""

from __future__ import annotations

import math

import pytest
import torch

from samelang.training.losses import LanguageCoherenceLoss, adr_mse, approx_ranks, average_label_ranks

LABELS = torch.tensor([[1.0, 1.0, 0.0, 0.0]])


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def test_language_coherence_hand_computed():
    s = torch.tensor([[2.0, 1.0, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    want_0 = 0.5 * (softplus(1.0 - 2.0) + softplus(0.5 - -1.0))
    want_1 = math.log(2.0)  # src == tgt scores tie: the constant ln 2
    assert LanguageCoherenceLoss()(s).item() == pytest.approx((want_0 + want_1) / 2, abs=1e-6)


def test_language_coherence_prefers_the_query_language():
    loss = LanguageCoherenceLoss()
    coherent = loss(torch.tensor([[3.0, 1.0, 0.0, -2.0]]))
    swapped = loss(torch.tensor([[1.0, 3.0, -2.0, 0.0]]))
    assert coherent.item() < math.log(2.0) < swapped.item()
    s = torch.tensor([[1.0, 1.0, 0.0, 0.0]], requires_grad=True)
    loss(s).backward()  # the gradient lifts the source-language versions, lowers the target ones
    assert s.grad[0, 0] < 0 < s.grad[0, 1] and s.grad[0, 2] < 0 < s.grad[0, 3]
    with pytest.raises(ValueError, match=r"\(batch, 4\)"):
        loss(torch.zeros(2, 3))


def test_adr_mse_hand_computed():
    assert average_label_ranks(LABELS).tolist() == [[1.5, 1.5, 3.5, 3.5]]
    s = torch.tensor([[2.0, 1.0, 0.0, 0.0]])
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    r_hat = [
        1 + sig(1 - 2) + sig(0 - 2) + sig(0 - 2),
        1 + sig(2 - 1) + sig(0 - 1) + sig(0 - 1),
        1 + sig(2 - 0) + sig(1 - 0) + sig(0 - 0),
        1 + sig(2 - 0) + sig(1 - 0) + sig(0 - 0),
    ]
    assert approx_ranks(s)[0].tolist() == pytest.approx(r_hat, abs=1e-6)
    target, w = [1.5, 1.5, 3.5, 3.5], [1 / math.log2(1.5 + 1)] * 2 + [1 / math.log2(3.5 + 1)] * 2
    want = sum(wi * (t - r) ** 2 for wi, t, r in zip(w, target, r_hat, strict=True)) / 4
    assert adr_mse(s, LABELS).item() == pytest.approx(want, abs=1e-6)
    # positives far above negatives: the loss is small, and it ignores the order inside a parallel pair
    sep = adr_mse(torch.tensor([[9.0, 9.0, -9.0, -9.0]]), LABELS).item()
    assert sep < 0.01 and adr_mse(torch.tensor([[-9.0, -9.0, 9.0, 9.0]]), LABELS).item() > 1.0


class _ScoresAsModel:
    """Stands in for a CrossEncoder in sentence-transformers' ADRMSELoss: the 'document' is its score."""

    num_labels = 1
    device = torch.device("cpu")

    def preprocess(self, pairs, prompt=None, task=None):
        return {"s": torch.tensor([float(d) for _, d in pairs])}

    def __call__(self, tokens):
        return {"scores": tokens["s"]}


def test_adr_mse_equals_sentence_transformers_adrmseloss():
    from sentence_transformers.cross_encoder.losses import ADRMSELoss

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(8, 4, generator=g) * 3
    labels = LABELS.expand(8, 4)
    docs = [[str(x) for x in row.tolist()] for row in scores]
    theirs = ADRMSELoss(_ScoresAsModel())((["q"] * 8, docs), list(labels)).item()
    assert adr_mse(scores, labels).item() == pytest.approx(theirs, rel=1e-5)


def test_the_relevance_loss_is_cross_entropy_with_the_positive_first_and_masks_short_groups():
    import torch.nn.functional as F

    from samelang.training.losses import listwise_softmax

    s = torch.tensor([[2.0, 1.0, 0.5], [0.1, 3.0, -1.0]])
    assert torch.allclose(listwise_softmax(s), F.cross_entropy(s, torch.zeros(2, dtype=torch.long)))
    mask = torch.tensor([[True, True, False], [True, True, True]])
    short = torch.tensor([[2.0, 1.0, 99.0], [0.1, 3.0, -1.0]])  # a padded slot never counts
    zero = torch.zeros(1, dtype=torch.long)
    want = (F.cross_entropy(s[:1, :2], zero) + F.cross_entropy(s[1:], zero)) / 2
    assert torch.allclose(listwise_softmax(short, mask), want)

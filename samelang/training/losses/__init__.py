"""The seeds' own losses (and the relevance stage's), one per module, each with its formula in the docstring."""

from samelang.training.losses.adr_mse import adr_mse, approx_ranks, average_label_ranks
from samelang.training.losses.info_nce import InfoNCELoss
from samelang.training.losses.jsd import JSDLoss, js_divergence
from samelang.training.losses.language_coherence import LanguageCoherenceLoss
from samelang.training.losses.listwise_softmax import listwise_softmax

__all__ = [
    "InfoNCELoss", "JSDLoss", "LanguageCoherenceLoss", "adr_mse", "approx_ranks", "average_label_ranks",
    "js_divergence", "listwise_softmax",
]  # fmt: skip

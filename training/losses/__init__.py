"""The seeds' own losses, one per module, each with its formula in the docstring."""

from .adr_mse import adr_mse, approx_ranks, average_label_ranks
from .info_nce import InfoNCELoss
from .jsd import JSDLoss, js_divergence
from .language_coherence import LanguageCoherenceLoss

__all__ = [
    "InfoNCELoss", "JSDLoss", "LanguageCoherenceLoss", "adr_mse", "approx_ranks", "average_label_ranks",
    "js_divergence",
]  # fmt: skip

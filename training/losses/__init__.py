"""The seeds' own losses, one per module, each with its formula in the docstring."""

from .info_nce import InfoNCELoss
from .jsd import JSDLoss, js_divergence

__all__ = ["InfoNCELoss", "JSDLoss", "js_divergence"]

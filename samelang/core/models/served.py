"""What every model folder served through the inference engine has in common: the precision and
cache tag the engine chose, and the sentence-transformers object itself on demand (the engine runs
an ONNX graph or a torch module and does not need it)."""

from __future__ import annotations

import functools


class EngineModel:
    """Base of :class:`~samelang.core.models.encoder.Encoder` and
    :class:`~samelang.core.models.cross_encoder.CrossEncoderReranker`: ``engine`` is set by the subclass,
    and ``model_fresh()`` loads its sentence-transformers object."""

    engine = None

    def model_fresh(self):
        raise NotImplementedError

    @functools.cached_property
    def model(self):
        """The sentence-transformers model itself (loaded on first use)."""
        return self.model_fresh()

    @property
    def precision(self) -> str:
        """``fp32``, ``int8``, ...: how the engine runs the model."""
        return self.engine.precision

    @property
    def cache_tag(self) -> str:
        """What embedding and score caches and indexes must key on besides the fingerprint (``int8-sq1``:
        the precision and its quantisation recipe)."""
        return self.engine.variant

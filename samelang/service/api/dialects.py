"""The handlers of every dialect over one pipeline, built once and swapped as one: a new index
generation (:func:`~samelang.service.api.reload.swap_index`) replaces the pipeline under all
routes in a single assignment, so no request sees one dialect on the old index and another on the
new."""

from __future__ import annotations

from dataclasses import dataclass

from samelang.retrieval.pipeline import Pipeline
from samelang.service.api.native.handlers import NativeHandlers
from samelang.service.api.openai.handlers import OpenAIHandlers
from samelang.service.api.tei.handlers import TeiHandlers


@dataclass(frozen=True)
class Dialects:
    """``app.state.handlers``: samelang's own routes, the OpenAI/Cohere ones and TEI's."""

    native: NativeHandlers
    openai: OpenAIHandlers
    tei: TeiHandlers

    @classmethod
    def over(cls, pipeline: Pipeline) -> Dialects:
        return cls(NativeHandlers(pipeline), OpenAIHandlers(pipeline), TeiHandlers(pipeline))

    @property
    def pipeline(self) -> Pipeline:
        return self.native.pipeline

"""The extractive reader: a start/end span head over a BERT-family encoder (``AutoModelForQuestionAnswering``) that
copies the answer out of the passages ``/answer`` retrieved.

Why extractive on CPU: a 270M generator names the wrong person, loops or repeats the question; a span is always text
of the passage, in its language, found by a model the size of the retriever. Training and inference share the windows
(:func:`span_features`), so what the model learnt is what it is asked: ``question [SEP] passage`` windows of
``max_length`` tokens overlapping by ``stride`` (:class:`Windows`, ``tokenizers`` only). The forward passes are the
inference engine's (:mod:`.engine`, ``span`` head; on CPU an ONNX graph, so an extractive server never imports
torch). A span scores ``start_logit + end_logit`` minus the window's no-answer score (the two logits at the first
token, SQuAD 2.0's convention); the reader answers with the best span over all windows of all passages when that
margin reaches the folder's calibrated ``threshold`` (``reader.json``, chosen on dev questions by the trainer), else
it answers nothing rather than guess.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from samelang.core.model_folder import model_fingerprint, read_manifest
from samelang.core.models.hub import locate
from samelang.core.models.loading import load_span_model
from samelang.core.runtime.engine import InferenceEngine, engine_for
from samelang.core.runtime.onnx_export import Head, backend_tokenizer
from samelang.core.runtime.precision import EngineOptions, resolve

READER_CONFIG = "reader.json"  # the calibrated threshold and the windows it was calibrated with
TOP_N = 20  # start and end candidates per window


@dataclass(frozen=True)
class Span:
    """An answer read out of one passage: its text, where it lies, and how sure the reader is."""

    text: str
    passage: int  # index of the passage among those read
    start: int  # character offsets in that passage
    end: int
    score: float  # start + end logit minus the window's no-answer logits (>= threshold: answered)


def passage_room(max_length: int) -> int:
    """Tokens a window keeps for the passage however long the question (cut to a third) is."""
    return max_length - max(8, max_length // 3) - 4  # [CLS] q [SEP][SEP] p [SEP] (XLM-R's pair template)


def check_windows(max_length: int, stride: int) -> None:
    """The tokenizer needs a stride shorter than the passage's room in a window (else it panics)."""
    if not 0 <= stride < passage_room(max_length):
        raise ValueError(f"reader windows: stride {stride} must be below {passage_room(max_length)} tokens for a "
                         f"{max_length}-token window (--stride, --reader-max-length)")  # fmt: skip


class Windows:
    """The reader's tokenisation, ``tokenizers`` only (no transformers, hence no torch, at serving):
    ``question [SEP] passage`` windows of ``max_length`` tokens overlapping by ``stride`` (a long
    passage read whole), questions cut to a third of the window so a passage always has room. The
    same windows as transformers' fast tokenizer makes with ``truncation="only_second"``,
    ``return_overflowing_tokens`` and a stride: it calls this library underneath (a window and its
    overflow are ``[encoding, *encoding.overflowing]``). One copy of the tokenizer, made once, truncates
    windows (~0.3 GB and 0.5 s for e5's: not one more than needed); questions are cut with the
    tokenizer given when it is a ``tokenizers`` one, the engine's (only the first ``q_max`` tokens'
    offsets are read, so its own truncation at the model's length is no matter). Thread-safe: neither
    changes after."""

    def __init__(self, tokenizer, max_length: int, stride: int):
        check_windows(max_length, stride)
        self.max_length, self.stride, self.q_max = max_length, stride, max(8, max_length // 3)
        self.plain = tokenizer if isinstance(tokenizer, Tokenizer) else backend_tokenizer(tokenizer)
        self.windowed = backend_tokenizer(tokenizer)
        self.windowed.enable_truncation(max_length, stride=stride, strategy="only_second")

    def cut(self, question: str) -> str:
        """``question`` cut after its first ``q_max`` tokens, at the character the tokenizer reports."""
        enc = self.plain.encode(question, add_special_tokens=False)
        return question if len(enc.ids) <= self.q_max else question[: enc.offsets[self.q_max - 1][1]]

    def features(self, questions: list[str], passages: list[str]) -> dict:
        """``input_ids``, ``attention_mask``, ``offset_mapping`` (character offsets into the passage;
        ``None`` outside it) and ``overflow_to_sample_mapping`` (the pair each window came from)."""
        out: dict[str, list] = {"input_ids": [], "attention_mask": [], "offset_mapping": [],
                                "overflow_to_sample_mapping": []}  # fmt: skip
        pairs = [(self.cut(q), p) for q, p in zip(questions, passages)]
        for k, enc in enumerate(self.windowed.encode_batch(pairs)):
            for w in [enc, *enc.overflowing]:
                out["input_ids"].append(w.ids)
                out["attention_mask"].append(w.attention_mask)
                out["offset_mapping"].append([o if s == 1 else None for o, s in zip(w.offsets, w.sequence_ids)])
                out["overflow_to_sample_mapping"].append(k)
        return out


def span_features(tokenizer, questions: list[str], passages: list[str], max_length: int, stride: int) -> dict:
    """:meth:`Windows.features` of a one-off :class:`Windows` (the trainer's: all its examples at once)."""
    return Windows(tokenizer, max_length, stride).features(questions, passages)


def best_spans(start: np.ndarray, end: np.ndarray, offsets: list, max_answer_tokens: int) -> tuple[float, int, int]:
    """The best ``(margin, start_char, end_char)`` of one window's logits (margin over the no-answer
    logits at position 0); ``(-inf, 0, 0)`` when no span lies inside the passage."""
    null = float(start[0] + end[0])
    n = len(offsets)
    starts = [i for i in np.argsort(-start[:n])[:TOP_N] if offsets[i] is not None]
    ends = [j for j in np.argsort(-end[:n])[:TOP_N] if offsets[j] is not None]
    best = (-np.inf, 0, 0)
    for i in starts:
        for j in ends:
            if i <= j < i + max_answer_tokens:
                score = float(start[i] + end[j]) - null
                if score > best[0]:
                    best = (score, offsets[i][0], offsets[j][1])
    return best


class ExtractiveReader:
    """A span reader of a model folder: a full ``AutoModelForQuestionAnswering`` checkpoint, or a
    LoRA adapter (with its trained ``qa_outputs`` head) over the converted base model."""

    kind = "extractive"

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        *,
        home: Path,
        max_length: int | None = None,
        stride: int | None = None,
        max_answer_tokens: int = 30,
        threshold: float | None = None,
        options: EngineOptions | None = None,
    ):
        fix = "train one with `samelang train reader`"
        self.path = locate(path, "extractive reader", fix)
        if not is_span_model(self.path):
            raise ValueError(f"{self.path} holds no extractive reader (no span head): {fix}")
        self.name, self.device, self.home = self.path.name, device, home
        self.fingerprint = model_fingerprint(self.path)
        saved = read_reader_config(self.path)
        # the windows the threshold was calibrated on, unless the caller asks for others
        self.max_length = int(max_length or saved.get("max_length", 384))
        self.stride = int(saved.get("stride", 128) if stride is None else stride)
        check_windows(self.max_length, self.stride)
        self.max_answer_tokens = max_answer_tokens
        self.threshold = float(saved.get("threshold", 0.0) if threshold is None else threshold)
        if not math.isfinite(self.threshold):
            raise ValueError(f"reader threshold must be a finite number, not {self.threshold}")
        self.options = options or EngineOptions()
        self._lock, self._loaded = threading.Lock(), None

    def _load(self):
        model, tokenizer = load_span_model(self.path, self.home, self.device)
        return model, tokenizer, {"reader": self.name}

    @property
    def _engine(self) -> tuple[InferenceEngine, Windows]:
        """(engine, windows), made on first use (one load however many requests ask at once): on
        CPU an ONNX graph exported once per fingerprint (no torch at serving), else torch."""
        with self._lock:
            if self._loaded is None:
                engine = engine_for(self._load, Head.SPAN, self.path, self.home, self.options, self.device)
                self._loaded = engine, Windows(engine.tokenizer, self.max_length, self.stride)
            return self._loaded

    def load(self) -> ExtractiveReader:
        """Load the model now (a server that answers extractively by default pays it at start-up)."""
        self._engine  # noqa: B018
        return self

    def describe(self) -> dict:
        """Precision and backend as ``/info`` reports them, known without loading
        (:func:`.precision.resolve`: the folder's recorded choice, else fp32 on ONNX Runtime on CPU,
        bf16/fp16 on GPU)."""
        chosen = resolve(self.options, self.device, self.path)
        return {"precision": chosen.precision, "backend": chosen.backend}

    def spans(self, question: str, passages: list[str]) -> list[Span]:
        """The best span of each passage (windows merged), best first."""
        if not passages:
            return []
        engine, windows = self._engine
        feats = windows.features([question] * len(passages), passages)
        logits = engine.run_tokens(feats["input_ids"])
        best: dict[int, tuple[float, int, int]] = {}
        for k, y in enumerate(logits):
            cand = best_spans(y[:, 0], y[:, 1], feats["offset_mapping"][k], self.max_answer_tokens)
            p = feats["overflow_to_sample_mapping"][k]
            if cand[0] > best.get(p, (-np.inf,))[0]:
                best[p] = cand
        spans = [Span(passages[p][s:e].strip(), p, s, e, score) for p, (score, s, e) in best.items() if e > s]
        return sorted(spans, key=lambda s: -s.score)

    def read(self, question: str, passages: list[str]) -> Span | None:
        """The best span over ``passages`` when its margin reaches the threshold, else ``None``."""
        spans = self.spans(question, passages)
        return spans[0] if spans and spans[0].score >= self.threshold and spans[0].text else None


def is_span_model(path: Path) -> bool:
    """Whether ``path`` holds a span model: a reader adapter (its manifest says so) or a full
    checkpoint whose architecture answers questions."""
    kind = (read_manifest(path) or {}).get("kind")
    if kind is not None:
        return str(kind).startswith("extractive-reader")
    config = path / "config.json"
    archs = json.loads(config.read_text()).get("architectures", []) if config.exists() else []
    return any(a.endswith("ForQuestionAnswering") for a in archs)


def read_reader_config(path: str | Path) -> dict:
    file = Path(path) / READER_CONFIG
    return json.loads(file.read_text()) if file.exists() else {}


def write_reader_config(path: str | Path, config: dict) -> None:
    (Path(path) / READER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")

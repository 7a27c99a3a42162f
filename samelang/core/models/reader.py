"""The extractive reader: a start/end span head over a BERT-family encoder (``AutoModelForQuestionAnswering``)
that copies the answer out of the passages ``/answer`` retrieved.

Why extractive on CPU: a 270M generator is not a reader (it names the wrong person, loops, repeats
the question); a span can only be text of the passage, in the passage's language, and the model
that finds it is the size of the retriever. The same windows here serve training and inference
(:func:`span_features`), so what the model learnt is what it is asked.

Inputs are ``question [SEP] passage`` windows of ``max_length`` tokens, overlapping by ``stride``
(a long passage is read whole). A span's score is ``start_logit + end_logit`` minus the window's
no-answer score (the same two logits at the first token, SQuAD 2.0's convention); the reader
answers with the best span over every window of every passage when that margin reaches the
folder's calibrated ``threshold`` (``reader.json``, chosen on dev questions by the trainer), else it
answers nothing rather than guess.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from samelang.core.models.folder import model_fingerprint, read_manifest
from samelang.core.models.hub import locate
from samelang.core.models.loading import load_span_model
from samelang.core.models.precision import cpu_has_bf16

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


def span_features(tokenizer, questions: list[str], passages: list[str], max_length: int, stride: int) -> dict:
    """Tokenised ``question [SEP] passage`` windows: ``input_ids``, ``attention_mask``,
    ``offset_mapping`` (character offsets into the passage; ``None`` outside it) and
    ``overflow_to_sample_mapping`` (the pair each window came from). Questions are cut to a third of
    the window so a passage always has room."""
    check_windows(max_length, stride)
    q_max = max(8, max_length // 3)
    questions = [_cut(tokenizer, q, q_max) for q in questions]
    enc = tokenizer(
        questions, passages, truncation="only_second", max_length=max_length, stride=stride,
        return_overflowing_tokens=True, return_offsets_mapping=True, padding=False,
    )  # fmt: skip
    offsets = []
    for i, offs in enumerate(enc["offset_mapping"]):
        seq = enc.sequence_ids(i)
        offsets.append([o if s == 1 else None for o, s in zip(offs, seq)])
    return {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "offset_mapping": offsets,
        "overflow_to_sample_mapping": enc["overflow_to_sample_mapping"],
    }


def _cut(tokenizer, text: str, n_tokens: int) -> str:
    pieces = tokenizer.tokenize(text)
    return text if len(pieces) <= n_tokens else tokenizer.convert_tokens_to_string(pieces[:n_tokens])


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


def pad(rows: list[list[int]], value: int) -> np.ndarray:
    width = max(len(r) for r in rows)
    return np.array([r + [value] * (width - len(r)) for r in rows], dtype=np.int64)


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
        self._lock, self._loaded = threading.Lock(), None

    @property
    def _model(self):
        """(model, tokenizer), loaded on first use (one load however many requests ask at once)."""
        with self._lock:
            if self._loaded is None:
                self._loaded = load_span_model(self.path, self.home, self.device)
            return self._loaded

    def load(self) -> ExtractiveReader:
        """Load the model now (a server that answers extractively by default pays it at start-up)."""
        self._model  # noqa: B018
        return self

    @property
    def precision(self) -> str:
        """bf16 where the CPU computes it natively (or on GPU), else fp32."""
        return "bf16" if (self.device != "cpu" or cpu_has_bf16()) else "fp32"

    def spans(self, question: str, passages: list[str], batch_size: int = 8) -> list[Span]:
        """The best span of each passage (windows merged), best first."""
        if not passages:
            return []
        import torch  # deferred: keeps torch out of start-up

        model, tokenizer = self._model
        feats = span_features(tokenizer, [question] * len(passages), passages, self.max_length, self.stride)
        best: dict[int, tuple[float, int, int]] = {}
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        for b in range(0, len(feats["input_ids"]), batch_size):
            ids = pad(feats["input_ids"][b : b + batch_size], tokenizer.pad_token_id)
            mask = pad(feats["attention_mask"][b : b + batch_size], 0)
            amp = torch.autocast(self.device.split(":")[0], dtype, enabled=dtype != torch.float32)
            with torch.inference_mode(), amp:
                out = model(input_ids=torch.from_numpy(ids).to(self.device),
                            attention_mask=torch.from_numpy(mask).to(self.device))  # fmt: skip
            start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for w in range(len(ids)):
                k = b + w
                cand = best_spans(start[w], end[w], feats["offset_mapping"][k], self.max_answer_tokens)
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

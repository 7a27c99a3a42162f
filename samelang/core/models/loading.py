"""Loading a model folder into sentence-transformers: a full checkpoint as it is, a LoRA adapter merged
onto the converted base model, with transformers' load reports turned into one line that says what
was initialised from where.

Apart from :mod:`samelang.core.model_folder` (which only knows the folder's files) because merging an
adapter needs the base model, and the base model's conversion writes a folder."""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from samelang.core.model_folder import (
    adapter_saved_modules,
    is_adapter,
    model_fingerprint,
    read_adapter_config,
    read_manifest,
)
from samelang.core.models.base_model import BASE_MODEL_NAME, ensure_base_model
from samelang.core.models.hub import check_remote_code, is_hub_id, locate

log = logging.getLogger("samelang")

# ---------------------------------------------------------------------------------------- loading
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _LoadReport(logging.Filter):
    """Holds back transformers' LOAD REPORT (and, for an adapter's base, sentence-transformers'
    "Converting ... to CrossEncoder" notice) so that :func:`load_model` can say what they mean."""

    def __init__(self, drop_conversion_notice: bool):
        super().__init__()
        self.reports: list[str] = []
        self.drop_conversion_notice = drop_conversion_notice

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "LOAD REPORT" in msg:
            self.reports.append(_ANSI.sub("", msg))
            return False
        return not (self.drop_conversion_notice and msg.startswith("Converting ") and " model " in msg)


def _report_rows(report: str) -> list[tuple[str, str]]:
    """(key, status) rows of a LOAD REPORT table ("key | MISSING | ...")."""
    rows = []
    for line in report.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 2 and cells[1].isupper() and cells[0] and cells[0] != "Key":
            rows.append((cells[0], cells[1]))
    return rows


@contextmanager
def _quiet_load(drop_conversion_notice: bool):
    """Capture the load reports, hide the per-file weight-loading bars and peft's deprecation notice
    about transformers' ``is_gradient_checkpointing`` (library plumbing, nothing about our model)."""
    from transformers.utils import logging as hf_logging  # deferred: keeps transformers out of start-up

    held = _LoadReport(drop_conversion_notice)
    loggers = [logging.getLogger("transformers.modeling_utils"), logging.getLogger("sentence_transformers.base.model")]
    bars = hf_logging.is_progress_bar_enabled()
    for lg in loggers:
        lg.addFilter(held)
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            yield held
    finally:
        for lg in loggers:
            lg.removeFilter(held)
        if bars:
            hf_logging.enable_progress_bar()


def _explain(name: str, reports: list[str], covered: dict[str, str]) -> list[str]:
    """What the held reports mean: one phrase per module that ``covered`` explains; any other row
    (an unexplained missing or unexpected weight) is logged with the full report, as transformers would."""
    explained: dict[str, str] = {}
    for report in reports:
        rows = _report_rows(report)
        unexplained = []
        for key, status in rows:
            module = next((m for m in covered if m in key.split(".")), None)
            if status == "MISSING" and module is not None:
                explained[module] = covered[module]
            else:
                unexplained.append(key)
        if unexplained or not rows:
            log.warning("%s: weights not explained by the model folder (%s):\n%s", name, unexplained[:5], report)
    by_reason: dict[str, list[str]] = {}
    for m, why in sorted(explained.items()):
        by_reason.setdefault(why, []).append(m)
    return [f"{'+'.join(mods)} {why}" for why, mods in by_reason.items()]


def adapter_base(path: str | Path, home: Path) -> Path:
    """The base a LoRA adapter was trained on, as its manifest records it: the converted
    multilingual-e5-small (the default, made under ``home``), or a folder or hub id (at the revision
    it was trained on), checked against the fingerprint the adapter recorded of it."""
    manifest = read_manifest(path) or {}
    base = str(manifest.get("base", BASE_MODEL_NAME))
    if base == BASE_MODEL_NAME:
        return ensure_base_model(home)
    folder = locate(base, "base model", f"the adapter {Path(path).name} was trained on it; restore it",
                    revision=manifest.get("base_revision"))  # fmt: skip
    want = manifest.get("source_sha256")
    if want and model_fingerprint(folder) != want:
        raise ValueError(f"{Path(path).name} was trained on {base} with fingerprint {want[:12]}, but {folder} holds "
                         "other weights: restore the base it was trained on")  # fmt: skip
    return folder


def base_record(named: str | None, folder: Path) -> dict:
    """What an adapter's manifest records of the base it was trained on (:func:`adapter_base` reads it
    back): the converted e5 by name, a hub id with its snapshot's revision, or a folder by path; and
    the base's fingerprint (``source_sha256``, which the adapter's own fingerprint includes)."""
    manifest = read_manifest(folder) or {}
    if manifest.get("name") == BASE_MODEL_NAME:
        return {"base": BASE_MODEL_NAME, "source_sha256": manifest.get("source_sha256")}
    folder = Path(folder)
    hub_id = named if named and is_hub_id(named) else None
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else {}
    record = {"base": hub_id.partition("@")[0] if hub_id else str(folder.resolve()),
              "source_sha256": model_fingerprint(folder), "base_model_type": config.get("model_type")}  # fmt: skip
    if hub_id and folder.parent.name == "snapshots":
        record["base_revision"] = folder.name  # the commit: a later `main` is another model
    return record


def load_model(
    path: str | Path,
    build: Callable[[Path], object],
    home: Path,
    unused: dict[str, str] | None = None,
    trust_remote_code: bool = False,
):
    """The sentence-transformers model of a folder: ``build(folder)`` (a ``SentenceTransformer`` or
    ``CrossEncoder`` constructor) on a full checkpoint, or on the converted base model with the
    folder's LoRA adapter merged into its transformer (and its saved modules, e.g. a cross-encoder's
    trained pooler and classifier, swapped in), so inference runs a plain model.

    ``unused`` names modules the caller never reads and why (a mean-pooling bi-encoder ignores the
    BERT pooler). Weights the base lacks but the adapter saves, or that are unused, are expected:
    instead of transformers' MISSING report (which reads as if the model were untrained) one INFO
    line says what was initialised from where; anything else is still reported as a warning."""
    path = Path(path)
    adapter = is_adapter(path)
    saved = adapter_saved_modules(path)
    covered = {m: "from the adapter's saved modules" for m in saved}
    for m, why in (unused or {}).items():
        covered.setdefault(m, f"not in the checkpoint, unused ({why})")
    if not adapter:
        check_remote_code(path, trust_remote_code)
        with _quiet_load(drop_conversion_notice=False) as held:
            model = build(path)
        notes = _explain(path.name, held.reports, covered)
        log.info("%s: full checkpoint%s", path.name, "".join(f"; {n}" for n in notes))
        return model.eval()
    from peft import PeftModel  # deferred: peft imports torch, which a server on ONNX never loads

    base = adapter_base(path, home)
    layers = (read_manifest(path) or {}).get("base_layers")
    with _quiet_load(drop_conversion_notice=True) as held:
        model = build(base)
        transformer = model[0]
        if layers:
            keep_layers(transformer.model, int(layers))
        transformer.model = PeftModel.from_pretrained(transformer.model, str(path)).merge_and_unload()
    notes = _explain(path.name, held.reports, covered)
    r = read_adapter_config(path).get("r")
    kept = f" (its first {layers} layers)" if layers else ""
    notes_text = "".join(f"; {n}" for n in notes)
    log.info("%s: base %s%s + LoRA adapter (r=%s) merged%s", path.name, base.name, kept, r, notes_text)
    return model.eval()


def keep_layers(hf_model, n: int) -> None:
    """Keep the first ``n`` transformer layers of a BERT-family model (a faster model: the layers above are
    dropped, not skipped), as a model trained with ``--layers n`` was."""
    import torch  # deferred: peft's caller already imports it; a server on ONNX never reaches this

    encoder = hf_model.base_model.encoder
    if not 1 <= n <= len(encoder.layer):
        raise ValueError(f"cannot keep {n} layers of a model with {len(encoder.layer)}")
    encoder.layer = torch.nn.ModuleList(list(encoder.layer)[:n])
    hf_model.config.num_hidden_layers = n


def load_span_model(path: str | Path, home: Path, device: str = "cpu"):
    """``(model, tokenizer)`` of an extractive reader's folder (:mod:`.reader`): a full
    ``AutoModelForQuestionAnswering`` checkpoint, or the converted base model with the folder's LoRA
    adapter merged in and its trained ``qa_outputs`` head (the base has none) in place."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer  # deferred: torch only when used

    path = Path(path)
    if not is_adapter(path):
        check_remote_code(path, trust_remote_code=False)
        with _quiet_load(drop_conversion_notice=False):
            model = AutoModelForQuestionAnswering.from_pretrained(path)
        return model.to(device).eval(), AutoTokenizer.from_pretrained(path)
    from peft import PeftModel  # deferred: peft imports torch

    base = adapter_base(path, home)
    layers = (read_manifest(path) or {}).get("base_layers")
    with _quiet_load(drop_conversion_notice=True):
        model = AutoModelForQuestionAnswering.from_pretrained(base, num_labels=2)  # the span head the adapter holds
        if layers:
            keep_layers(model, int(layers))
        model = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    log.info("%s: base %s + LoRA adapter merged, qa_outputs from the adapter", path.name, base.name)
    return model.to(device).eval(), AutoTokenizer.from_pretrained(base)

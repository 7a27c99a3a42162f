"""The model folder: the one module that knows its files, in the spirit of sentence-transformers' save/load (a folder
is the model's whole state; what reads or writes it goes through here).

A folder under ``models/`` (or ``$SAMELANG_HOME/models``) is a **full checkpoint** (a transformers ``config.json``
and, for a bi-encoder, sentence-transformers' ``modules.json``) or a **LoRA adapter** (``adapter_config.json`` +
``adapter_model.safetensors``) over the converted base model, which :func:`load_model` merges so that inference runs
a plain model (a cross-encoder adapter also saves its trained pooler and head). Beside the weights, our own records:
``samelang_manifest.json`` (what the folder is, its source's checksums: the fingerprint that keys ONNX graphs and
caches), ``inference.json`` (the precision ``samelang eval precision`` chose per device, read by ``precision=auto``),
``training_args.json`` / ``history.json`` (the training run) and ``README.md`` (the model card, whose ``## ``
sections evaluation commands replace one at a time). Why one owner: the file names, one adapter loader and the
card's edits live in one place, so no two copies of them can drift apart.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from samelang.core.paths import REPO_MODELS
from samelang.primitives.atomic import atomic_write_text

log = logging.getLogger("samelang")

CONFIG = "config.json"  # transformers
ST_MODULES = "modules.json"  # sentence-transformers
ADAPTER_CONFIG = "adapter_config.json"  # peft
ADAPTER_WEIGHTS = "adapter_model.safetensors"
WEIGHTS = "model.safetensors"
MANIFEST = "samelang_manifest.json"
INFERENCE = "inference.json"
TRAINING_ARGS = "training_args.json"
HISTORY = "history.json"
EVAL_RESULTS = "eval_results.json"
CARD = "README.md"


# ------------------------------------------------------------------------------------------ what it is
def is_adapter(path: str | Path) -> bool:
    """A LoRA adapter folder (needs the converted base model to load)."""
    return (Path(path) / ADAPTER_CONFIG).exists()


def is_model_folder(path: str | Path) -> bool:
    """A folder :func:`load_model` can load: a transformers / sentence-transformers checkpoint or an adapter."""
    return any((Path(path) / f).exists() for f in (ST_MODULES, CONFIG, ADAPTER_CONFIG))


def _read_json(file: Path) -> dict | None:
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError):
        return None


def _write_json(file: Path, obj, end: str = "") -> None:
    # no trailing newline by default: the adapter checksum covers adapter_config.json's exact bytes
    atomic_write_text(file, json.dumps(obj, indent=2) + end)


def read_manifest(path: str | Path) -> dict | None:
    """The folder's ``samelang_manifest.json``; ``None`` when absent or unreadable (not prepared yet)."""
    return _read_json(Path(path) / MANIFEST)


def write_manifest(path: str | Path, manifest: dict) -> None:
    _write_json(Path(path) / MANIFEST, manifest)


def read_adapter_config(path: str | Path) -> dict:
    return json.loads((Path(path) / ADAPTER_CONFIG).read_text())


def write_adapter_config(path: str | Path, config: dict) -> None:
    _write_json(Path(path) / ADAPTER_CONFIG, config)


def adapter_saved_modules(path: str | Path) -> tuple[str, ...]:
    """The modules an adapter saves in full besides its LoRA weights (a cross-encoder's trained
    ``classifier`` and ``pooler``, which the base model lacks)."""
    if not is_adapter(path):
        return ()
    return tuple(read_adapter_config(path).get("modules_to_save") or ())


def read_training_args(path: str | Path) -> dict | None:
    return _read_json(Path(path) / TRAINING_ARGS)


def read_history(path: str | Path) -> list | None:
    file = Path(path) / HISTORY
    return json.loads(file.read_text()) if file.exists() else None


def model_fingerprint(path: str | Path) -> str:
    """Identity of a checkpoint: the manifest's source hashes when there is one (cheap), else a
    sha256 over the config and weight files (a hub checkpoint). What ONNX exports, embedding caches
    and the demo index are keyed on."""
    path = Path(path)
    manifest = read_manifest(path)
    h = hashlib.sha256()
    if manifest is not None:
        for key in ("source_sha256", "adapter_sha256", "weights_sha256", "converter_version"):
            if key in manifest:
                h.update(f"{key}={manifest[key]};".encode())
        return h.hexdigest()
    files = sorted(p for p in path.rglob("*") if p.suffix in {".json", ".safetensors", ".bin"} and p.is_file())
    if not files:
        raise FileNotFoundError(f"{path} holds no model files")
    for f in files:
        h.update(str(f.relative_to(path)).encode())
        with open(f, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------ the inference record
# Where the record of a model converted at run time (the base model, made under $SAMELANG_HOME on each
# machine) ships: models/<its folder name>/inference.json in the repository
SHIPPED_RECORDS = REPO_MODELS
LEGACY_CPU = "cpu:x86-avx2"  # the first format's one "cpu" entry was measured on an AVX2 EPYC


def read_inference(path: str | Path | None) -> dict:
    """``inference.json``: ``{"default_precision": {device: precision}, "comparison": {device: rows},
    "note": {device: text}, "fingerprint": ...}`` with ``device`` = ``cuda`` or ``cpu:<class>`` (see
    :func:`samelang.core.runtime.precision.cpu_class`); ``{}`` when the folder has none (never measured). A
    folder without one falls back to the record shipped under ``models/<folder name>/`` when that
    record names the folder's fingerprint (the base model, converted on each machine). The first
    formats (one ``cpu`` entry; a list of rows) read as measured on ``x86-avx2``."""
    if path is None:
        return {}
    record = _read_json(Path(path) / INFERENCE)
    if record is None:
        shipped = _read_json(SHIPPED_RECORDS / Path(path).name / INFERENCE)
        # only for the very model it was measured on (a folder of the same name may hold another)
        own = _fingerprint_or_none(path)
        record = shipped if shipped and own is not None and shipped.get("fingerprint") == own else {}
    if isinstance(record.get("comparison"), list):
        record["comparison"] = {"cpu": record["comparison"]}
    if isinstance(record.get("note"), str):
        record["note"] = {"cpu": record["note"]}
    for part in ("default_precision", "comparison", "note"):
        table = record.get(part)
        if isinstance(table, dict) and "cpu" in table:
            table.setdefault(LEGACY_CPU, table.pop("cpu"))
    return record


def _fingerprint_or_none(path: str | Path) -> str | None:
    try:
        return model_fingerprint(path)
    except (FileNotFoundError, OSError):
        return None


ONNX_MODEL_TYPES = ("bert", "xlm-roberta", "roberta")  # what ONNX Runtime's BERT fusion (the served graph) handles


def onnx_unfit(path: str | Path | None) -> str | None:
    """Why the model in ``path`` does not export to the fused BERT graph of the ONNX backend (``None``:
    it does; an adapter over the converted e5 base does)."""
    if path is None:
        return None
    if is_adapter(path):  # the base it merges onto decides (an adapter over the converted e5 records none)
        config = {"model_type": (read_manifest(path) or {}).get("base_model_type", "bert")}
    else:
        config = _read_json(Path(path) / CONFIG)
    if config is None:
        return None
    if config.get("auto_map"):
        return "it runs its own code"
    kind = config.get("model_type")
    if kind not in ONNX_MODEL_TYPES:
        return f"its architecture ({kind}) is not BERT-family"
    return None


def recorded_precision(path: str | Path | None, device: str) -> str | None:
    """The precision ``samelang eval precision`` chose for ``device`` (``cuda`` / ``cpu:<class>``), if any."""
    return read_inference(path).get("default_precision", {}).get(device)


def record_precision(
    path: str | Path, device: str, chosen: str, rows: list[dict], note: str, model: str | Path | None = None
) -> None:
    """Record ``device``'s choice, comparison rows and note in ``inference.json``, keeping the other
    devices' and CPU classes' (and upgrading the first formats, see :func:`read_inference`). The record
    names the fingerprint of ``model`` (default: the folder itself; a shipped record names the
    converted folder it was measured on)."""
    record = read_inference(path)
    record.setdefault("default_precision", {})[device] = chosen
    record.setdefault("comparison", {})[device] = rows
    record.setdefault("note", {})[device] = note
    record["fingerprint"] = _fingerprint_or_none(model or path)
    _write_json(Path(path) / INFERENCE, record, end="\n")


# --------------------------------------------------------------------------------------- the card
def write_card(path: str | Path, text: str) -> None:
    """The whole model card (a trainer's first write; later commands replace sections)."""
    atomic_write_text(Path(path) / CARD, text)


def write_card_section(path: str | Path, heading: str, body: str) -> None:
    """Replace the card's section ``heading`` (a ``## `` line) with ``body``, keeping every other
    section where it is; a missing section is appended, a missing card is started with the folder's
    name as title."""
    replace_section(Path(path) / CARD, heading, body)


def replace_section(file: str | Path, heading: str, body: str, *, before: str | None = None) -> None:
    """Replace the Markdown section ``heading`` of ``file`` (up to the next ``## ``) with ``body``,
    keeping every other section; a missing section goes before the line ``before`` when given and
    present, else at the end; a missing file is started with its folder's name as title. Model
    cards and the measured pages of docs/ are both kept this way."""
    file = Path(file)
    text = file.read_text() if file.exists() else f"# {file.parent.name}\n"
    if heading not in text and before and before in text:
        head, _, rest = text.partition(before)
        later = before + rest
    else:
        head, _, rest = text.partition(heading)
        later = rest[rest.index("\n## ") + 1 :] if "\n## " in rest else ""
    head = head.rstrip("\n") + "\n\n"
    atomic_write_text(file, head + f"{heading}\n\n{body}" + ("\n" + later if later else ""))


def read_card_section(path: str | Path, heading: str) -> str | None:
    """The body of the card's section ``heading`` (up to the next ``## ``), or ``None``."""
    card = Path(path) / CARD
    if not card.exists() or heading not in (text := card.read_text()):
        return None
    rest = text.partition(heading)[2]
    end = rest.find("\n## ")
    return (rest if end < 0 else rest[:end]).strip("\n") + "\n"

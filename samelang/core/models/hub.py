"""Where a model named on the command line lives: a folder, or a Hugging Face hub id (``org/name``,
optionally ``org/name@revision``) found through ``huggingface_hub`` in the hub cache.

Why through ``huggingface_hub``: the cache layout (``models--org--name/snapshots/<sha>``), its
``HF_HOME`` / ``HF_HUB_CACHE`` / ``HF_HUB_OFFLINE`` variables and revision pinning are what every
user of the papers' models already has; a host with internet downloads on first use, a host
without one (or with ``HF_HUB_OFFLINE=1``) is served from the cache. A folder always wins over an id
of the same spelling. Custom-code checkpoints (``auto_map`` in ``config.json``, e.g. the jina models)
are refused unless ``--trust-remote-code`` is given, rather than loaded as a stock class.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from samelang.core.model_folder import ADAPTER_CONFIG, is_model_folder

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


class ModelNotFound(FileNotFoundError):
    """A model reference that is neither a model folder nor a hub id in the cache (or downloadable)."""


def is_hub_id(ref: str | Path) -> bool:
    """``org/name`` or ``org/name@revision`` that is not an existing path."""
    text = str(ref)
    return bool(_HUB_ID.match(text)) and not Path(text).exists() and not text.startswith(("./", "../"))


def split_revision(ref: str, revision: str | None = None) -> tuple[str, str | None]:
    """``("org/name", revision)`` of ``org/name@revision`` (the inline revision wins over ``revision``)."""
    repo, _, inline = str(ref).partition("@")
    return repo, inline or revision


def locate(ref: str | Path, what: str, fix: str, *, revision: str | None = None) -> Path:
    """The folder of ``ref``: itself when it holds a model, else the hub snapshot of the id ``ref``
    (downloaded when the hub is reachable and ``HF_HUB_OFFLINE`` is unset). Raises
    :class:`ModelNotFound` naming what was looked for, where, and ``fix``."""
    if is_model_folder(ref):
        return Path(ref)
    if not is_hub_id(ref):
        raise ModelNotFound(f"no {what} checkpoint at {ref} (no config.json, modules.json or {ADAPTER_CONFIG} "
                            f"there): {fix}")  # fmt: skip
    return snapshot(str(ref), what, fix, revision=revision)


def snapshot(ref: str, what: str, fix: str, *, revision: str | None = None) -> Path:
    from huggingface_hub import constants, snapshot_download  # deferred: only a hub id needs it
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    repo, rev = split_revision(ref, revision)
    try:
        folder = Path(snapshot_download(repo, revision=rev))
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError, OSError, ValueError) as e:
        offline = " (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else ""
        at = f" at revision {rev}" if rev else ""
        raise ModelNotFound(
            f"no {what} checkpoint at {ref}: not a folder, and the Hugging Face hub id {repo}{at} is neither in the "
            f"hub cache {constants.HF_HUB_CACHE} nor downloadable{offline} ({type(e).__name__}). Download it on a "
            f"host with internet (`hf download {repo}`) and copy the cache, or pass a folder; {fix}"
        ) from e
    if not is_model_folder(folder):
        raise ModelNotFound(f"the hub snapshot {folder} of {ref} holds no model (no config.json, modules.json or "
                            f"{ADAPTER_CONFIG}): {fix}")  # fmt: skip
    return folder


def custom_code(folder: Path) -> list[str]:
    """The classes a checkpoint's ``config.json`` maps to its own code (``auto_map``), if any."""
    config = Path(folder) / "config.json"
    if not config.exists():
        return []
    try:
        auto_map = json.loads(config.read_text()).get("auto_map") or {}
    except ValueError:
        return []
    return sorted({str(v if isinstance(v, str) else v[0]) for v in auto_map.values()})


def check_remote_code(folder: Path, trust_remote_code: bool) -> None:
    """Refuse a checkpoint that needs its own code unless the user trusts it: loaded as a stock class
    it would run without a word, and wrongly."""
    classes = custom_code(folder)
    if classes and not trust_remote_code:
        raise ValueError(f"{folder} runs its own code ({', '.join(classes[:3])}): pass --trust-remote-code "
                         "(SAMELANG_TRUST_REMOTE_CODE=1) to run it, after reading it")  # fmt: skip

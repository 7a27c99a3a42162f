"""``samelang data fetch``: every declared file of a source downloaded from its repository at the pinned commit,
checked against its size and sha256, and written into the corpus store as one complete folder.

Why fetch rather than ship: the seven sources weigh 29 MB upstream and each comes under its own
licence (PROVENANCE.md), which a user accepts by fetching it from its publisher; the product ships only what it
needs at run time. The declarations in ``sources.json`` (repository, commit, path, size, sha256) are exactly
what a downloader needs; ``pooch`` (the field's well-kept downloader) brings retries, a cache and progress.
A source is written only when every one of its files is the declared one, so a wrong hash or a missing file
leaves the store as it was. ``samelang data import --snapshots DIR`` stays for machines without a network.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

from samelang.corpora.sources import Source, SourceFile
from samelang.corpora.store import CorpusStore

RAW_GITHUB = "https://raw.githubusercontent.com"
OFFLINE_HINT = "no network here? fill the store from snapshots: samelang data import --snapshots DIR"


class FetchError(RuntimeError):
    """A declared file that could not be had as declared; the message names the file and the fix."""


def file_url(base_url: str, source: Source, f: SourceFile) -> str:
    """Where ``f`` is published: ``<base>/<owner>/<name>/<commit>/<path>`` (GitHub's raw-file layout)."""
    return f"{base_url.rstrip('/')}/{source.repo}/{source.commit}/{f.path}"


def _download(url: str, f: SourceFile, cache: Path, retries: int) -> bytes:
    import pooch  # deferred: only `samelang data fetch` downloads
    import requests

    name = f"{f.sha256[:16]}-{Path(f.path).name}"
    try:
        path = pooch.retrieve(url, known_hash=f"sha256:{f.sha256}", fname=name, path=cache, progressbar=True,
                              downloader=pooch.HTTPDownloader(progressbar=True, timeout=60))  # fmt: skip
    except ValueError as e:  # pooch: the hash differs (the file it got is deleted)
        fix = "the file changed upstream: check samelang/corpora/sources.json against the repository"
        raise FetchError(f"{url}: not the declared file (sha256 {f.sha256[:12]}...): {e}; {fix}") from e
    except requests.HTTPError as e:
        fix = "the declared path is not at that commit: check samelang/corpora/sources.json"
        raise FetchError(f"{url}: {e}; {fix}") from e
    except requests.RequestException as e:
        if retries > 0:
            return _download(url, f, cache, retries - 1)
        raise FetchError(f"{url}: cannot download ({type(e).__name__}). {OFFLINE_HINT}") from e
    data = Path(path).read_bytes()
    if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:  # pooch checked; the size is ours
        raise FetchError(f"{url}: {len(data)} bytes, not the declared {f.size}")
    return data


def fetch_source(source: Source, store: CorpusStore, base_url: str, cache: Path, retries: int = 2) -> str:
    """Download every file of ``source`` and write it into ``store`` (all or nothing); what happened."""
    blobs = {f: _download(file_url(base_url, source, f), f, Path(cache) / source.name, retries) for f in source.files}
    store.write(source, blobs)
    return f"fetched {len(blobs)} files ({sum(len(b) for b in blobs.values()):,} bytes) from {source.repo}"


def fetch_sources(sources: Sequence[Source], store: CorpusStore, base_url: str, cache: Path, force: bool = False,
                  log: Callable[[str], None] = print) -> dict[str, str]:  # fmt: skip
    """Each source fetched (or kept: already in the store, unless ``force``); a source that fails is
    reported, and the others are still fetched."""
    report = {}
    for source in sources:
        if store.has(source) and not force:
            report[source.name] = "already in the store"
            continue
        log(f"{source.name}: {len(source.files)} files from {source.repo}@{source.commit[:12]}")
        try:
            report[source.name] = fetch_source(source, store, base_url, cache)
        except FetchError as e:
            report[source.name] = f"not fetched: {e}"
    return report

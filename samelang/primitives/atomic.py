"""Write files and folders so that a reader never sees them half-made.

Everything is first written under a temporary name in the same folder (same
file system), then renamed (a file) or exchanged (a folder) into place; a crash
leaves only a ``.tmp-*`` entry that the next writer ignores and overwrites.
"""

from __future__ import annotations

import ctypes
import errno
import io
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _step(name: str) -> None:
    """Called between the steps of :func:`atomic_dir` (``written``, ``swapped``, ``synced``,
    ``cleaned``); a no-op. The crash tests replace it in a child process with one that kills the
    process at a given step, and check what the path holds afterwards."""


def _exchange_function() -> Callable[[bytes, bytes], int] | None:
    """An atomic swap of two paths, or ``None`` where the C library has none: ``renameat2(...,
    RENAME_EXCHANGE)`` (Linux >= 3.15, glibc >= 2.28) or ``renamex_np(..., RENAME_SWAP)`` (macOS)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if hasattr(libc, "renameat2"):
        fn = libc.renameat2
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        return lambda a, b: fn(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE)
    if hasattr(libc, "renamex_np"):
        fn = libc.renamex_np
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        return lambda a, b: fn(a, b, _RENAME_SWAP)
    return None


_AT_FDCWD, _RENAME_EXCHANGE, _RENAME_SWAP = -100, 2, 2
_EXCHANGE = _exchange_function()


def exchange(a: str | Path, b: str | Path) -> bool:
    """Swap the entries ``a`` and ``b`` (both must exist) in one atomic step: every reader sees
    either the old or the new entry at each name, never neither. False where the system or the
    file system cannot (no such call, or e.g. a network file system that answers EINVAL)."""
    if _EXCHANGE is None:
        return False
    if _EXCHANGE(os.fsencode(a), os.fsencode(b)) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


@contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a scratch folder that replaces ``target`` only if the block succeeds.

    The scratch folder is a sibling (same file system). A new ``target`` appears with one rename.
    An existing one is *exchanged* with the scratch folder in one atomic step (:func:`exchange`),
    so the path holds the complete old folder until that step and the complete new one after it:
    a reader (a server opening the index, a process loading the model) never finds the path
    missing or half-made, and a crash at any point leaves one of the two whole. The old content,
    now under the scratch name, is deleted last; a crash before that leaves a ``.NAME.tmp-*``
    sibling that nothing reads. This keeps ``target`` a plain folder, so every reader of the
    existing layouts (indexes, model folders) works unchanged; a symlink to generation folders
    would have needed the same care from every caller that copies, deletes or resolves the path.

    Where no atomic exchange exists (see :func:`exchange`) the old folder is moved aside and the
    new one renamed into place: two renames, with the path missing for the moment between them.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _step("written")
    old = None
    if target.exists() or target.is_symlink():
        if exchange(tmp, target):
            old = tmp  # the scratch name now holds the old folder
        else:
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.rename(old)
            tmp.rename(target)
    else:
        tmp.rename(target)
    _step("swapped")
    _fsync_dir(target.parent)
    _step("synced")
    if old is not None:
        if old.is_symlink() or not old.is_dir():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)
    _step("cleaned")


def atomic_write_bytes(target: str | Path, data: bytes) -> None:
    """Write ``data`` to ``target`` via a temporary file and ``os.replace``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(target.parent)


def atomic_write_text(target: str | Path, text: str) -> None:
    atomic_write_bytes(target, text.encode("utf-8"))


def cached_array(path: Path, compute):
    """``np.load(path)`` when it exists, else ``compute()`` saved atomically to ``path`` (``.npy``):
    the disk cache of teacher scores and of evaluation scores."""
    import numpy as np  # deferred: keeps numpy out of the CLI's start-up (this module is on its path)

    path = Path(path)
    if path.exists():
        return np.load(path)
    out = compute()
    buf = io.BytesIO()
    np.save(buf, out)
    atomic_write_bytes(path, buf.getvalue())
    return out

"""Crash-safe file replacement shared by the broker's log and the consumer's recover store.

A file is replaced atomically (write a temp file, fsync, rename, fsync the directory) so a crash leaves
either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
from pathlib import Path

from metaq.errors import StorageError

__all__ = ["atomic_write", "fsync_dir"]


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that a created, renamed or deleted entry in it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path | str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers and crashes see the old or the new content only."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {e.strerror or e}") from e

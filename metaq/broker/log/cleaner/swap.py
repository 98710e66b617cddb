"""Crash-safe replacement of segments by their cleaned copy, and its recovery when a log is opened.

The steps, as Kafka's ``LocalLog.replaceSegments`` and ``LogLoader`` (docs/compaction.md):

1. the cleaner writes ``<base>.log.cleaned`` (and ``.index.cleaned``, ``.timeindex.cleaned``, ``.txnindex.cleaned``)
   and fsyncs them;
2. it renames them to ``*.swap`` and fsyncs the directory: from here the cleaned copy is durable and wins;
3. the replaced segments are renamed ``*.deleted`` (removed later, readers may still send from them);
4. the ``.swap`` files are renamed to their final names.

At open, ``.cleaned`` files are removed (a cleaning interrupted before step 2: the old segments are whole);
for ``.swap`` files, every other segment file whose base offset lies in ``[smallest swap base, largest swap
end)`` is removed (a crash during step 3) and the ``.swap`` files are renamed (step 4). A kill -9 at any point
thus leaves either the old segments or the cleaned copy, each holding every latest value.

``METAQ_CLEANER_CRASH_AT`` (tests only) names a step at which the broker kills itself with SIGKILL:
``cleaned`` (after step 1), ``swap`` (after step 2) or ``replace`` (after step 3).
"""

from __future__ import annotations

import logging
import os
import re
import signal
from pathlib import Path

from metaq.errors import CorruptRecordError
from metaq.fileio import fsync_dir
from metaq.protocol.batches import BATCH_HEADER_SIZE, read_header

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "fault_point", "finish_swap", "recover_swaps", "remove_cleaned", "swap_in"]

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
CRASH_ENV = "METAQ_CLEANER_CRASH_AT"
_SEGMENT_PART = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)(\.[a-z]+)?$")


def fault_point(step: str) -> None:
    """Kill this process with SIGKILL if ``METAQ_CLEANER_CRASH_AT`` names ``step`` (crash tests)."""
    if os.environ.get(CRASH_ENV) == step:
        logger.warning("Killing the broker at cleaner step %r (%s is set)", step, CRASH_ENV)
        os.kill(os.getpid(), signal.SIGKILL)


def _parts(directory: Path, base: int, suffix: str) -> list[Path]:
    name = f"{base:020d}"
    return [directory / f"{name}.{kind}{suffix}" for kind in ("log", "index", "timeindex", "txnindex")]


def swap_in(directory: Path, base: int) -> None:
    """Step 2: rename the cleaned files of ``base`` to ``.swap`` and make that durable."""
    for path in _parts(directory, base, CLEANED_SUFFIX):
        path.rename(path.with_name(path.name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX))
    fsync_dir(directory)


def finish_swap(directory: Path, base: int) -> None:
    """Step 4: the ``.swap`` files of ``base`` take their final names."""
    for path in _parts(directory, base, SWAP_SUFFIX):
        if path.exists():
            path.rename(path.with_name(path.name[: -len(SWAP_SUFFIX)]))


def remove_cleaned(directory: Path, base: int) -> None:
    """An abandoned cleaning: its ``.cleaned`` and ``.swap`` files go."""
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        for path in _parts(directory, base, suffix):
            path.unlink(missing_ok=True)


def recover_swaps(directory: Path) -> None:
    """At open, before segments are loaded: complete or roll back interrupted cleanings (module doc)."""
    swaps: list[tuple[int, int]] = []
    for entry in os.scandir(directory):
        match = _SEGMENT_PART.match(entry.name)
        if match is None:
            continue
        if match.group(3) == CLEANED_SUFFIX:
            logger.info("Removing %s: an interrupted cleaning", entry.path)
            Path(entry.path).unlink(missing_ok=True)
        elif match.group(3) == SWAP_SUFFIX and match.group(2) == "log":
            base = int(match.group(1))
            swaps.append((base, _next_offset(Path(entry.path), base)))
    if not swaps:
        return
    low, high = min(base for base, _ in swaps), max(end for _, end in swaps)
    for entry in os.scandir(directory):
        match = _SEGMENT_PART.match(entry.name)
        if match is not None and match.group(3) != SWAP_SUFFIX and low <= int(match.group(1)) < high:
            logger.info("Removing %s: replaced by a cleaned segment before a crash", entry.path)
            Path(entry.path).unlink(missing_ok=True)
    for base, _ in swaps:
        logger.info("Completing the swap of the cleaned segment %d of %s", base, directory)
        finish_swap(directory, base)
    fsync_dir(directory)


def _next_offset(path: Path, base: int) -> int:
    """The offset after the last batch of a ``.swap`` log file (its base offset if it has none)."""
    end = base
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position + BATCH_HEADER_SIZE <= size:
            try:
                header = read_header(os.pread(f.fileno(), BATCH_HEADER_SIZE, position))
            except CorruptRecordError:
                break
            end = header.next_offset
            position += header.size
    return end


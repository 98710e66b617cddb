"""What opening a partition log finds in its directory: the segment files (leftovers of interrupted deletes and
cleanings completed or removed first), each segment loaded, and those past the recovery point recovered (see
:func:`load_segments` for why a gap between segments keeps the later ones).
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from pathlib import Path

from metaq.broker.log.cleaner.swap import recover_swaps
from metaq.broker.log.config import LogConfig
from metaq.broker.log.segment import DELETED_SUFFIX, LOG_SUFFIX, LogSegment, segment_file_name

logger = logging.getLogger(__name__)


_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")


_LEFTOVER_SUFFIXES = (DELETED_SUFFIX,)  # .cleaned and .swap: recover_swaps()


def clean_directory(directory: Path) -> list[int]:
    """Startup housekeeping; return the sorted base offsets of the segments (``.log`` files).

    Completes or rolls back interrupted cleanings (``.swap``, ``.cleaned``: metaq/broker/log/cleaner/swap.py),
    removes leftovers of interrupted deletes (``.deleted``) and index files without a ``.log``. Other files
    are left alone."""
    recover_swaps(directory)
    logs: set[int] = set()
    indexes: list[tuple[int, Path]] = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        path = Path(entry.path)
        if entry.name.endswith(_LEFTOVER_SUFFIXES):
            logger.info("Removing leftover file %s", path)
            path.unlink(missing_ok=True)
            continue
        match = _SEGMENT_FILE.match(entry.name)
        if match is None:
            if entry.name.endswith(LOG_SUFFIX):
                logger.warning("Ignoring %s: not a segment file name", path)
            continue
        base = int(match.group(1))
        if match.group(2) == LOG_SUFFIX:
            logs.add(base)
        else:
            indexes.append((base, path))
    for base, path in indexes:
        if base not in logs:
            logger.warning("Removing index %s: it has no %s", path, segment_file_name(base, LOG_SUFFIX))
            path.unlink(missing_ok=True)
    return sorted(logs)


def load_segments(
    directory: Path, bases: list[int], config: LogConfig, *, recover: bool, recovery_point: int
) -> list[LogSegment]:
    """Open every segment; recover those from the one holding ``recovery_point`` if ``recover``.

    Each segment is cut at its own first invalid batch, and a cut never deletes later segments. The rule
    rests on one invariant: a segment is rolled at the log end offset, so its base offset is exactly where
    the previous segment's acknowledged data ends. Hence, for segment ``i`` followed by segment ``i+1``:

    * a batch of segment ``i`` reaching ``base(i+1)`` was never acknowledged (an append that failed after
      writing, e.g. on a full disk, before the log rolled): it is invalid and cut like a torn tail;
    * if segment ``i``, once cut, ends exactly at ``base(i+1)``, what was cut was never acknowledged either
      (a torn failed append), and the later segments continue the valid prefix: nothing was lost;
    * if it ends below ``base(i+1)``, acknowledged offsets in between are gone (unflushed data lost in a
      power failure, or corruption). That is logged as an error, but the later segments, whose batches are
      validated on their own, are still kept: Kafka deletes them because a replica can refill them; a
      single copy cannot, and deleting them would lose more acknowledged data and hand their offsets to new
      messages that consumers who already read those offsets would silently skip. The log keeps a gap,
      which fetches step over (a read in it is answered from the next batch, as after compaction).
    """
    first_to_recover = max(0, bisect_right(bases, recovery_point) - 1) if recover else len(bases)
    segments: list[LogSegment] = []
    try:
        for i, base in enumerate(bases):
            end_limit = bases[i + 1] if i + 1 < len(bases) else None
            segment, _ = LogSegment.load(directory, base, config, recover=i >= first_to_recover, end_limit=end_limit)
            segments.append(segment)
            if end_limit is not None and segment.next_offset < end_limit and not config.compact:
                logger.error(
                    "Offsets %d..%d of %s are lost: segment %s ends there, but the next segment starts at %d;"
                    " keeping the later segments",
                    segment.next_offset,
                    end_limit - 1,
                    directory,
                    segment.log_path.name,
                    end_limit,
                )
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments

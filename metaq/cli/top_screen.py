"""The screen of ``metaq top`` (metaq/cli/top.py registers the command): the live loop and the rendering
with rich, imported only when the command runs."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import signal
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterator
from types import FrameType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from metaq.admin import format_ms
from metaq.admin.groups import OK
from metaq.admin.watch import (
    AdminGroupSource,
    GroupWatch,
    PartitionRow,
    Sample,
    TopView,
    sample_group,
    short_id,
    to_json,
)
from metaq.cli.output import open_admin, print_json
from metaq.errors import MetaqError

log = logging.getLogger(__name__)

BAR_WIDTH = 20
LOG_LINES = 8
ONCE_WIDTH = 160  # --once into a pipe or file: wide enough for generated consumer ids


def run(args: argparse.Namespace) -> int:
    if args.json and not args.once:
        args._parser.error("--json needs --once (a live view is for a terminal)")
    if not args.once and not sys.stdout.isatty():
        args._parser.error("stdout is not a terminal: use --once to print one frame")
    with open_admin(args) as admin:
        source = AdminGroupSource(admin)
        watch = GroupWatch(args.group, rate_window_s=max(10.0, 3 * args.interval))
        view = watch.update(_sample(source, args.group))  # a missing group fails here, with exit 1
        if args.once:
            if args.json:
                print_json(to_json(view))
            else:
                width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else ONCE_WIDTH
                Console(width=width, highlight=False).print(render(view, interval=None))
            return 0
        return _live(source, watch, view, args.interval)


def _sample(source: AdminGroupSource, group: str) -> Sample:
    return sample_group(source, group, taken_s=time.monotonic(), now_ms=int(time.time() * 1000))


# -- the live loop ------------------------------------------------------------------------------------------


class _Refresher(threading.Thread):
    """Samples the group every ``interval`` seconds off the keyboard thread, so ``q`` answers at once even
    while a broker is slow; the newest result waits in :meth:`take`."""

    def __init__(self, source: AdminGroupSource, group: str, interval: float) -> None:
        super().__init__(name="metaq-top-refresh", daemon=True)
        self._source, self._group, self._interval = source, group, interval
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._result: Sample | str | None = None

    def run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                result: Sample | str = _sample(self._source, self._group)
            except MetaqError as e:
                result = str(e)
            except Exception as e:  # a bug, or the session closed under us on quit: on screen, not a traceback
                if self._stopped.is_set():
                    return
                log.debug("refresh failed", exc_info=True)
                result = f"unexpected {type(e).__name__}: {e}"
            with self._lock:
                self._result = result

    def take(self) -> Sample | str | None:
        with self._lock:
            result, self._result = self._result, None
        return result

    def now(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()


def _live(source: AdminGroupSource, watch: GroupWatch, view: TopView, interval: float) -> int:
    """Redraw until ``q``, Ctrl-C or SIGTERM; exit code 0 in every case, with the terminal restored."""
    refresher = _Refresher(source, watch.group, interval)
    console = Console(highlight=False)
    previous_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with _keyboard() as read_key, Live(console=console, screen=True, auto_refresh=False) as live:
            refresher.start()
            drawn_at = 0.0
            while True:
                key = read_key(0.2)
                if key in ("q", "Q"):
                    return 0
                if key in ("r", "R"):
                    refresher.now()
                result = refresher.take()
                if isinstance(result, Sample):
                    view = watch.update(result)
                elif isinstance(result, str):
                    view = watch.failed(result, int(time.time() * 1000)) or view
                if result is not None or time.monotonic() - drawn_at >= 1.0:  # ages move every second
                    live.update(render(view, interval=interval, height=console.size.height,
                                       now_ms=int(time.time() * 1000)), refresh=True)
                    drawn_at = time.monotonic()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        refresher.stop()
        refresher.join(2.0)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _keyboard() -> Iterator[Callable[[float], str | None]]:
    """``read_key(timeout)``: one key press or None. The terminal is in cbreak mode (keys without Enter, no
    echo, Ctrl-C still a signal) until the block ends; without a terminal on stdin it only waits."""
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        yield lambda timeout: time.sleep(timeout)
        return
    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)

    def read_key(timeout: float) -> str | None:
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 32).decode(errors="replace")[:1] if ready else None

    tty.setcbreak(fd)
    try:
        yield read_key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


# -- rendering ----------------------------------------------------------------------------------------------


def render(view: TopView, *, interval: float | None, height: int | None = None,
           now_ms: int | None = None) -> RenderableType:
    """One frame: header, members, partitions and the rebalance log; commit ages are moved on to ``now_ms``
    (between refreshes the frame is redrawn every second). With a ``height`` (a live screen) the frame fits
    it: the partition rows come first, the log gets the lines left (at least LOG_LINES, one line an entry)."""
    parts: list[RenderableType] = [_header(view, interval, wrap=height is None)]
    members = _members(view)
    if members is not None:
        parts.append(members)
    room, log_lines = None, LOG_LINES
    if height is not None:
        fixed = 2 + len(view.notes) + (1 if view.error else 0)  # the header
        fixed += 0 if view.members is None else max(1, len(view.members)) + 2  # members: title, header, rows
        fixed += 2 + 1  # the partitions' title and header, the log's title
        available = height - fixed
        log_lines = min(len(view.log), max(LOG_LINES, available - max(1, len(view.partitions))))
        room = max(3, available - log_lines)
    elapsed_ms = 0 if now_ms is None else max(0, now_ms - view.sampled_ms)
    parts += [_partitions(view, room, elapsed_ms), _log(view, log_lines, wrap=height is None)]
    return Group(*parts)


def _header(view: TopView, interval: float | None, *, wrap: bool) -> Text:
    kind = "ZooKeeper group" if view.kind == "zookeeper" else "protocol group (broker coordinator)"
    when = format_ms(view.sampled_ms)[11:19]
    keys = f"every {interval:g}s · q quit · r refresh" if interval is not None else "one frame (--once)"
    text = Text(no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
    text.append(f"metaq top · {view.group}", style="bold")
    text.append(f" · {kind} · {when} UTC · {keys}\n")
    if view.members is None:
        members = f"members {view.member_note or 'unknown'}"
    else:
        members = f"members {len(view.members)}"
    text.append(f"{members} · partitions {len(view.partitions)} · total lag {view.total_lag} · "
                f"consuming {_rate(view.consume_rate)}/s · producing {_rate(view.produce_rate)}/s · ")
    text.append(f"orphans {len(view.orphans)}", style="bold red" if view.orphans else "")
    for note in view.notes:
        text.append(f"\nNote: {note}", style="yellow")
    if view.error:
        text.append(f"\nrefresh failed: {view.error} (showing the last good data)", style="bold red")
    return text


def _members(view: TopView) -> Table | None:
    if view.members is None:
        return None
    table = Table(title="Members", title_justify="left", expand=False, box=None, header_style="bold")
    for header in ("MEMBER", "HOST", "OWNS"):
        table.add_column(header)
    for m in view.members:
        table.add_row(m.member_id, m.host or "-", _owns(m.owns) or "-")
    if not view.members:
        table.add_row("(no live members)", "", "")
    return table


def _owns(partitions: tuple[tuple[str, int], ...]) -> str:
    by_topic: dict[str, list[str]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(str(partition))
    return " ".join(f"{topic}:{','.join(ps)}" for topic, ps in by_topic.items())


def _partitions(view: TopView, room: int | None, elapsed_ms: int) -> Table:
    table = Table(title="Partitions", title_justify="left", box=None, header_style="bold")
    for header, justify in (("TOPIC", "left"), ("PART", "right"), ("OWNER", "left"), ("COMMITTED", "right"),
                            ("LOG-END", "right"), ("LAG", "right"), ("", "left"), ("RATE/S", "right"),
                            ("LAST-COMMIT", "right"), ("STATUS", "left")):
        table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    biggest = max([r.lag.lag or 0 for r in view.partitions] + [1])
    rows = view.partitions if room is None or len(view.partitions) <= room else view.partitions[:room - 1]
    for r in rows:
        owner = "-" if r.owner is None else short_id(view.group, r.owner)
        status = Text(r.lag.status, style="" if r.lag.status == OK else "bold red")
        table.add_row(r.lag.topic, str(r.lag.partition), owner, _cell(r.lag.offset), _cell(r.lag.log_end),
                      _cell(r.lag.lag), _bar(r.lag.lag, biggest), _rate(r.rate), _age(r, elapsed_ms), status)
    if len(rows) < len(view.partitions):
        table.add_row(f"… {len(view.partitions) - len(rows)} more (enlarge the terminal)")
    if not view.partitions:
        table.add_row("(no committed offsets, owners or subscribed topics)")
    return table


def _log(view: TopView, lines: int, *, wrap: bool) -> Table:
    table = Table(title="Rebalance log", title_justify="left", box=None, show_header=False)
    # One column, time first: rich shrinks the narrowest column of a row too wide for the screen, which cut
    # a separate time column to "00…"; this way only the event's end is cut (with an ellipsis).
    table.add_column("EVENT", no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
    for entry in view.log[-lines:] if lines > 0 else []:
        table.add_row(f"{format_ms(entry.time_ms)[11:19]}  {entry.text}")
    return table


def _bar(lag: int | None, biggest: int) -> Text:
    if not lag or lag <= 0:
        return Text("")
    filled = max(1, round(BAR_WIDTH * lag / biggest))
    return Text("█" * filled, style="red" if filled > BAR_WIDTH // 2 else "yellow")


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def _rate(rate: float | None) -> str:
    if rate is None:
        return "-"
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.1f}"


def _age(row: PartitionRow, elapsed_ms: int = 0) -> str:
    """How long ago the offset was committed (``~``: since top saw it move, for Kafka-stored offsets)."""
    if row.commit_age_ms is None:
        return "-"
    seconds = (row.commit_age_ms + elapsed_ms) // 1000
    if seconds < 60:
        text = f"{seconds}s"
    elif seconds < 3600:
        text = f"{seconds // 60}m{seconds % 60:02d}s"
    elif seconds < 86400:
        text = f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    else:
        text = f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
    return f"~{text}" if row.commit_observed else text

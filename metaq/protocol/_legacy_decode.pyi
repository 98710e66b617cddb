"""Types of the compiled v0/v1 message set loop (metaq/protocol/_legacy_decode.c)."""

from typing import Any

STOP_END: int
STOP_WRAPPER: int
STOP_BAD: int

def walk(data: bytes, pos: int, end: int, min_offset: int, check_crcs: bool, out: list[Any], offset_delta: int,
         timestamp: int | None, producer_magic: int, /) -> tuple[int, int | None, int]: ...
def last_offset(data: bytes, magic: int, /) -> int | None: ...

"""What a consumer hands to the application."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MessageAndMetadata:
    """One message as Kafka 0.8's ``MessageAndMetadata``: where it came from and its decoded key/value."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def next_offset(self) -> int:
        return self.offset + 1

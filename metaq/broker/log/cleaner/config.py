"""Broker-wide settings of the log cleaner (Kafka's ``log.cleaner.*`` broker properties)."""

from __future__ import annotations

from dataclasses import dataclass

from metaq.broker.log.cleaner.throttle import UNTHROTTLED


@dataclass(frozen=True)
class CleanerConfig:
    """``enable``: run cleaner threads at all; ``threads``: how many; ``dedupe_buffer_size``: bytes of offset map
    shared by the threads (each gets its share, as Kafka); ``backoff_ms``: a thread's sleep when no log needs
    cleaning; ``io_max_bytes_per_second``: read plus write bytes per second of all threads together
    (:mod:`.throttle`)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134217728
    backoff_ms: int = 15000
    io_max_bytes_per_second: float = UNTHROTTLED

    @property
    def map_bytes_per_thread(self) -> int:
        return self.dedupe_buffer_size // self.threads

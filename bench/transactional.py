"""Section 11 of ``python -m bench``: confluent-kafka's idempotent produce beside transactional produce in
transactions of 100 and 10,000 records, and the transactional topic fetched read_uncommitted vs read_committed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from bench.clients import confluent_consume, confluent_produce, transactional_produce
from bench.environment import Environment
from bench.throughput import Bench, Row

TRANSACTION_SIZES = (100, 10_000)


def run_transactions(env: Environment, messages: int, repeat: int) -> list[Row]:
    """confluent-kafka with acks=all: idempotent produce (what a transactional producer is without transactions),
    then produce in transactions of each of :data:`TRANSACTION_SIZES`, then the last transactional topic fetched
    read_uncommitted and read_committed (the broker's LSO and aborted-index work); ``repeat`` rounds, the order
    reversed in odd rounds."""
    bench = Bench(env.broker, env.layout, "transactions")
    value = b"x" * 100
    for rep in range(repeat):
        jobs: list[tuple[str, str, Callable[..., None], tuple[object, ...]]] = [
            ("idempotent", "produce", confluent_produce, (value, messages, "none", "all", True))]
        jobs += [(f"transactions of {size:,}", "produce", transactional_produce, (value, messages, size))
                 for size in TRANSACTION_SIZES]
        for label, job, fn, args in jobs[::-1] if rep % 2 else jobs:
            topic = bench.topic()
            bench.measure(label, job, 100, messages, fn, env.bootstrap, topic, *args)
        fetches = ["read_uncommitted", "read_committed"]
        for isolation in fetches[::-1] if rep % 2 else fetches:
            bench.measure(isolation, "fetch", 100, messages, confluent_consume, env.bootstrap, topic, messages,
                          isolation)
    return bench.rows


def transactions_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per job: median msgs/s and broker CPU s/1M, and the broker CPU relative to the job's baseline (idempotent
    produce; read_uncommitted fetch)."""
    header = ["client (confluent-kafka, acks=all, 100 B)", "job", "msgs/s", "broker CPU s/1M", "CPU vs baseline"]
    table = []
    baselines = {"produce": "idempotent", "fetch": "read_uncommitted"}
    for label in dict.fromkeys(r.client for r in rows):
        mine = [r for r in rows if r.client == label]
        base = [r for r in rows if r.client == baselines[mine[0].job]]
        cpu = statistics.median(r.broker_cpu / r.messages * 1e6 for r in mine)
        base_cpu = statistics.median(r.broker_cpu / r.messages * 1e6 for r in base)
        table.append([label, mine[0].job, f"{statistics.median(r.messages / r.seconds for r in mine):,.0f}",
                      f"{cpu:.2f}", f"{cpu / base_cpu:.2f}x" if base_cpu else "-"])
    return header, table

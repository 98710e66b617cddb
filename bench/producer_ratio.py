"""Sections 1c and 1d of ``python -m bench``: metaq.Producer beside confluent-kafka in alternating rounds (the
msgs/s ratio target of docs/performance.md), and what idempotence (acks=all) costs the broker's CPU.
"""

from __future__ import annotations

import statistics

from bench.clients import confluent_produce, metaq_produce
from bench.environment import Environment
from bench.targets import Target
from bench.throughput import Bench, Row, _per_m

PRODUCER_MESSAGES = 1_000_000
PRODUCER_TARGET = 0.8  # metaq.Producer's msgs/s >= 0.8x confluent-kafka's (median), same broker, same run


def run_producer_ratio(env: Environment, messages: int, repeat: int) -> list[Row]:
    """confluent-kafka and metaq.Producer (acks=1, linger.ms=5, batch.size 1,000,000, 100-byte values, one
    partition) in alternating order, ``repeat`` rounds on the shared broker: on a loaded machine only interleaved
    runs compare."""
    bench = Bench(env.broker, env.layout, "producer-ratio")
    value = b"x" * 100
    jobs = [("confluent-kafka", confluent_produce, env.bootstrap), ("metaq.Producer", metaq_produce, env.zk)]
    for rep in range(repeat):
        for client, fn, address in jobs[::-1] if rep % 2 else jobs:
            bench.measure(client, "produce", 100, messages, fn, address, bench.topic(), value, messages)
    return bench.rows


def producer_ratio_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Each round's metaq / confluent ratios (msgs/s, client and broker CPU per message), then the medians."""
    ours = [r for r in rows if r.client == "metaq.Producer"]
    theirs = [r for r in rows if r.client == "confluent-kafka"]
    header = ["round", "confluent msgs/s", "metaq msgs/s", "msgs/s ratio", "target", "met",
              "client CPU s/1M c | m", "broker CPU s/1M c | m"]
    table = []
    ratios = []
    for n, (m, c) in enumerate(zip(ours, theirs, strict=True), 1):
        ratio = (m.messages / m.seconds) / (c.messages / c.seconds)
        ratios.append(ratio)
        table.append([str(n), f"{c.messages / c.seconds:,.0f}", f"{m.messages / m.seconds:,.0f}", f"{ratio:.2f}x",
                      f">= {PRODUCER_TARGET}x", "yes" if ratio >= PRODUCER_TARGET else "NO",
                      f"{_per_m(c.client_cpu, c)} | {_per_m(m.client_cpu, m)}",
                      f"{_per_m(c.broker_cpu, c)} | {_per_m(m.broker_cpu, m)}"])
    if ratios:
        med = statistics.median(ratios)
        table.append(["median", f"{statistics.median(c.messages / c.seconds for c in theirs):,.0f}",
                      f"{statistics.median(m.messages / m.seconds for m in ours):,.0f}", f"{med:.2f}x",
                      f">= {PRODUCER_TARGET}x", "yes" if med >= PRODUCER_TARGET else "NO",
                      f"{statistics.median(c.client_cpu / c.messages * 1e6 for c in theirs):.2f} | "
                      f"{statistics.median(m.client_cpu / m.messages * 1e6 for m in ours):.2f}",
                      f"{statistics.median(c.broker_cpu / c.messages * 1e6 for c in theirs):.2f} | "
                      f"{statistics.median(m.broker_cpu / m.messages * 1e6 for m in ours):.2f}"])
    return header, table


def producer_targets(rows: list[Row]) -> list[Target]:
    """The median of the rounds' metaq / confluent msgs/s ratios."""
    pairs = zip([r for r in rows if r.client == "metaq.Producer"], [r for r in rows if r.client == "confluent-kafka"],
                strict=True)
    ratios = [(m.messages / m.seconds) / (c.messages / c.seconds) for m, c in pairs]
    if not ratios:
        return []
    return [Target(f"metaq.Producer/confluent-kafka produce msgs/s (median of {len(ratios)} alternating rounds)",
                   statistics.median(ratios), PRODUCER_TARGET)]


IDEMPOTENCE_TARGET = 1.10  # idempotence may cost the broker at most 10% more CPU (docs/delivery-guarantees.md §7)


def run_idempotence(env: Environment, messages: int, repeat: int) -> list[Row]:
    """confluent-kafka and metaq.Producer with acks=all, enable.idempotence false and true, interleaved (the order
    reversed in odd rounds): what the broker's per-batch producer state checks cost it."""
    bench = Bench(env.broker, env.layout, "idempotence")
    value = b"x" * 100
    jobs = [(client, idem, fn, address)
            for client, fn, address in (("confluent-kafka", confluent_produce, env.bootstrap),
                                        ("metaq.Producer", metaq_produce, env.zk))
            for idem in (False, True)]
    for rep in range(repeat):
        for client, idem, fn, address in jobs[::-1] if rep % 2 else jobs:
            label = f"{client} {'idempotent' if idem else 'plain'}"
            if fn is confluent_produce:
                bench.measure(label, "produce", 100, messages, fn, address, bench.topic(), value, messages, "none",
                              "all", idem)
            else:
                bench.measure(label, "produce", 100, messages, fn, address, bench.topic(), value, messages, "all",
                              idem)
    return bench.rows


def idempotence_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per client: median msgs/s and broker CPU s/1M, plain and idempotent, and the broker CPU ratio."""
    header = ["client", "plain msgs/s", "idempotent msgs/s", "broker CPU s/1M plain | idempotent", "CPU ratio",
              "target", "met"]
    table = []
    for client in ("confluent-kafka", "metaq.Producer"):
        plain = [r for r in rows if r.client == f"{client} plain"]
        idem = [r for r in rows if r.client == f"{client} idempotent"]
        if not plain or not idem:
            continue
        cpu_plain = statistics.median(r.broker_cpu / r.messages * 1e6 for r in plain)
        cpu_idem = statistics.median(r.broker_cpu / r.messages * 1e6 for r in idem)
        ratio = cpu_idem / cpu_plain if cpu_plain else float("nan")
        table.append([client, f"{statistics.median(r.messages / r.seconds for r in plain):,.0f}",
                      f"{statistics.median(r.messages / r.seconds for r in idem):,.0f}",
                      f"{cpu_plain:.2f} | {cpu_idem:.2f}", f"{ratio:.2f}x", f"<= {IDEMPOTENCE_TARGET:.2f}x",
                      "yes" if ratio <= IDEMPOTENCE_TARGET else "NO"])
    return header, table

"""``metaq topics reassign --generate|--execute|--verify|--cancel``: Kafka's ``kafka-reassign-partitions`` with its
JSON plans (docs/reassignment.md), over ZooKeeper (``--zookeeper``: ``/admin/reassign_partitions``,
metaq.admin.reassignment) or through the brokers (``--bootstrap-server``: AlterPartitionReassignments,
metaq.admin.reassign_brokers). ``--throttle`` sets the replication throttles of the moving replicas and
``--verify`` removes them once nothing of the plan moves (metaq.admin.reassign_throttle). Imports happen in the
functions: ``metaq topics --help`` loads no client.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metaq.cli.output import command_security, emit, open_admin, quiet_libraries, usage_error

if TYPE_CHECKING:
    from metaq.admin.reassign_brokers import BrokerReassignments
    from metaq.admin.reassign_throttle import ClearedThrottles, ThrottleConfigs
    from metaq.admin.reassignment import Plan
    from zk_layout import ZkLayout


def _read(args: argparse.Namespace, option: str) -> str:
    path = getattr(args, option.lstrip("-").replace("-", "_"))
    if not path:
        usage_error(args, f"{option} is required")
    with open(path, encoding="utf-8") as f:
        return f.read()


@dataclass
class _Backend:
    """What the modes need, over ZooKeeper or through the brokers (``brokers``: log directories need them)."""

    generate_layout: ZkLayout
    configs: ThrottleConfigs
    execute: Callable[[Plan, Callable[[Plan], None]], Plan]
    cancel: Callable[[Plan], list[tuple[str, int]]]
    verify: Callable[[Plan], dict[tuple[str, int], str]]
    brokers: BrokerReassignments | None = None


@contextmanager
def _backend(args: argparse.Namespace) -> Iterator[_Backend]:
    from metaq.admin import reassign_throttle as throttling
    from metaq.admin import reassignment as plans

    if args.bootstrap_server is not None:
        from metaq.admin.bootstrap import BootstrapLayout, as_layout
        from metaq.admin.reassign_brokers import BrokerReassignments

        if args.zookeeper or args.config:
            usage_error(args, "give either --bootstrap-server or --zookeeper/--config, not both")
        security = command_security(args)
        quiet_libraries()
        brokers = BrokerReassignments(BootstrapLayout.connect(args.bootstrap_server, security), security)
        log_dirs = plans.parse_log_dirs(_read(args, "--reassignment-json-file")) if args.execute else {}
        yield _Backend(as_layout(brokers.layout), brokers,
                       lambda plan, before: brokers.execute(plan, before, log_dirs), brokers.cancel,
                       brokers.verify, brokers)
        return
    with open_admin(args) as admin:
        layout = admin.layout
        yield _Backend(layout, throttling.ZooKeeperThrottleConfigs(layout),
                       lambda plan, before: plans.execute(layout, plan, before),
                       lambda plan: plans.cancel(layout, plan), lambda plan: plans.verify(layout, plan))


def run(args: argparse.Namespace) -> int:
    from metaq.admin import reassignment as plans

    if args.generate:
        return _generate(args)
    text = _read(args, "--reassignment-json-file")
    plan = plans.parse_plan(text)
    log_dirs = plans.parse_log_dirs(text)
    if log_dirs and args.bootstrap_server is None:
        usage_error(args, "a plan with log_dirs needs --bootstrap-server (the brokers place the replicas), as "
                          "Kafka's tool")
    with _backend(args) as backend:
        if args.execute:
            return _execute(args, backend, plan, log_dirs)
        if args.cancel:
            cancelled = backend.cancel(plan)
            emit(args, {"cancelled": [{"topic": t, "partition": p} for t, p in cancelled]},
                 lambda: f"Successfully cancelled partition reassignments for: "
                         f"{','.join(f'{t}-{p}' for t, p in cancelled)}" if cancelled
                 else "None of the specified partition reassignments are active.")
            return 0
        return _verify(args, backend, plan, log_dirs)


def _generate(args: argparse.Namespace) -> int:
    from metaq.admin import reassignment as plans

    if not args.broker_list:
        usage_error(args, "--broker-list is required with --generate")
    try:
        brokers = [int(b) for b in args.broker_list.split(",")]
    except ValueError:
        usage_error(args, f"--broker-list {args.broker_list!r}: expected ID[,ID...]")
    topics = plans.parse_topics_to_move(_read(args, "--topics-to-move-json-file"))
    with _backend(args) as backend:
        current, proposed = plans.generate(backend.generate_layout, topics, brokers)
    emit(args, {"current": plans.to_json(current), "proposed": plans.to_json(proposed)},
         lambda: f"Current partition replica assignment\n{plans.format_plan(current)}\n\n"
                 f"Proposed partition reassignment configuration\n{plans.format_plan(proposed)}")
    return 0


def _execute(args: argparse.Namespace, backend: _Backend, plan: Plan,
             log_dirs: Mapping[tuple[str, int, int], str]) -> int:
    from metaq.admin import reassign_throttle as throttling
    from metaq.admin import reassignment as plans

    throttled: list[str] = []

    def throttle(current: Plan) -> None:
        if args.throttle >= 0:
            throttles = throttling.reassignment_throttles(current, plan)
            throttling.set_throttles(backend.configs, throttles, args.throttle)
            throttled.extend(throttling.describe_throttles(throttles, args.throttle))

    current = backend.execute(plan, throttle)  # the brokers' backend also places the replicas of log_dirs
    emit(args, {"current": plans.to_json(current), "started": plans.to_json(plan),
                "throttle": args.throttle if throttled else None,
                "log_dirs": [{"topic": t, "partition": p, "broker": b, "log_dir": d}
                             for (t, p, b), d in sorted(log_dirs.items())]},
         lambda: f"Current partition replica assignment\n\n{plans.format_plan(current)}\n\n"
                 f"Save this to use as the --reassignment-json-file option during rollback\n"
                 + "".join(f"{line}\n" for line in throttled) +
                 f"Successfully started partition reassignments for "
                 f"{','.join(f'{t}-{p}' for t, p in sorted(plan))}"
                 + "".join(f"\nSuccessfully started moving log directory to {d} for replica {t}-{p} with broker {b}"
                           for (t, p, b), d in sorted(log_dirs.items())))
    return 0


def _verify(args: argparse.Namespace, backend: _Backend, plan: Plan,
            log_dirs: Mapping[tuple[str, int, int], str]) -> int:
    from metaq.admin import reassign_throttle as throttling
    from metaq.admin import reassignment as plans

    status = backend.verify(plan)
    moves = backend.brokers.log_dir_status(log_dirs) if log_dirs and backend.brokers is not None else {}
    cleared: ClearedThrottles | None = None
    if plans.IN_PROGRESS not in [*status.values(), *moves.values()] and not args.preserve_throttles:
        cleared = throttling.clear_throttles(backend.configs, plan)  # as Kafka: once nothing of the plan moves
    lines = [f"Reassignment of partition {t}-{p} is {s}." if s != plans.IN_PROGRESS
             else f"Reassignment of partition {t}-{p} is still in progress." for (t, p), s in sorted(status.items())]
    lines += [f"Reassignment of replica {t}-{p}-{b} " + ("completed successfully." if s == plans.COMPLETED
                                                          else "is still in progress.")
              for (t, p, b), s in sorted(moves.items())]
    if cleared is not None:
        lines += [f"Clearing broker-level throttles on brokers {','.join(map(str, cleared.brokers))}",
                  f"Clearing topic-level throttles on topics {','.join(cleared.topics)}"]
    emit(args, {"partitions": [{"topic": t, "partition": p, "status": s} for (t, p), s in sorted(status.items())],
                "log_dirs": [{"topic": t, "partition": p, "broker": b, "status": s}
                             for (t, p, b), s in sorted(moves.items())],
                "throttles_cleared": cleared is not None},
         lambda: "\n".join(lines))
    return 0 if all(s == plans.COMPLETED for s in [*status.values(), *moves.values()]) else 1

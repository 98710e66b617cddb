"""A catastrophic topic pattern against the topic names of real consumers' filters: matched in linear time (RE2),
in a child interpreter so that a regression fails by timeout instead of hanging the suite. The other hostile
ZooKeeper node formats are in tests/zk_layout/test_formats_hostile.py."""

from __future__ import annotations

import subprocess
import sys


def test_catastrophic_pattern_is_matched_in_linear_time() -> None:
    """``(a+)+$`` against a long run of ``a`` that does not match: Python's ``re`` backtracks for hours, RE2
    answers at once. Run in a child process so that a regression fails by timeout (generous: a loaded
    machine) instead of hanging the suite; the child holds the GIL while it backtracks."""
    code = (
        "from metaq.consumer.topic_filter import Whitelist\n"
        "from zk_layout import TopicCount\n"
        "topics = ['a' * 45 + '-', 'a' * 45]\n"
        "print(sorted(TopicCount({'(a+)+$': 1}, 'white_list').streams_per_topic(topics)))\n"  # peers' nodes
        "print(Whitelist('(a+)+$').filter(topics))\n"  # the consumer's own filter
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"['{'a' * 45}']"] * 2

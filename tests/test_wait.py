"""metaq.testing.wait_until: the one polling helper every test uses instead of sleep-then-assert."""

from __future__ import annotations

import itertools

import pytest

from metaq.testing.wait import wait_until


def test_returns_as_soon_as_the_condition_holds() -> None:
    calls = itertools.count(1)
    wait_until(lambda: next(calls) >= 3, 10, "the third call", interval=0.001)
    assert next(calls) == 4  # polled exactly until it held


def test_a_timeout_names_what_was_awaited_and_the_last_state() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for the broker"):
        wait_until(lambda: False, 0.05, "the broker")
    seen = []
    with pytest.raises(AssertionError, match=r"waiting for 3 answers, got \[1, 1"):
        wait_until(lambda: seen.append(1), 0.05, lambda: f"3 answers, got {seen}")


def test_predicate_errors_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 / 0, 10)

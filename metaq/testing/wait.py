"""The one way tests wait: poll a condition until it holds or a deadline passes (see :mod:`metaq.polling`).

Tests never sleep a fixed time and then assert, because on a loaded machine any fixed sleep is either too short
(flaky) or too long (slow); polling returns as soon as the condition holds and fails with what it waited for.
"""

from __future__ import annotations

from metaq.polling import wait_until

__all__ = ["wait_until"]

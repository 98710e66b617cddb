"""The targets every section states its ratios against, printed last by ``python -m bench`` in one format:

    target <name>: <value>x (goal >= <goal>x) met|NOT met

A target whose natural form is "at most" (CPU, memory) is stated inverted, the peer's figure over metaq's, so that
every goal reads ``>=``. A leaf module: it imports no other bench module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """One ratio (metaq's figure over the peer's, or inverted as the name says) and its goal."""

    name: str
    value: float
    goal: float

    @property
    def met(self) -> bool:
        return self.value >= self.goal

    def line(self) -> str:
        return f"target {self.name}: {self.value:.2f}x (goal >= {self.goal:g}x) {'met' if self.met else 'NOT met'}"


def print_targets(targets: list[Target]) -> None:
    if targets:
        print()
    for target in targets:
        print(target.line())

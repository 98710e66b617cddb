"""The plain-text tables every benchmark section prints."""

from __future__ import annotations

Table = tuple[list[str], list[list[str]]]
"""A section's table: the header and the rows, every cell already formatted (what :func:`print_table` takes)."""


def print_table(header: list[str], rows: list[list[str]], title: str | None = None) -> None:
    """Left-aligned first column, right-aligned numbers."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    if title:
        print(f"\n{title}")
    for i, row in enumerate([header, *rows]):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths,
                                                                                            strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))

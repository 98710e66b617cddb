"""Run tests with each of metaq.protocol.records' two record readers (the compiled ones: aiokafka's for v2
batches, metaq's own loop for v0/v1 message sets; and the pure-Python fallback and reference), so the
fallback stays correct on machines that have the compiled one.

    from metaq.testing.readers import each_record_reader  # noqa: F401 (autouse: every test here runs twice)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from metaq.protocol import legacy, records

__all__ = ["RECORD_READERS", "each_record_reader", "record_reader"]

RECORD_READERS = ["compiled", "pure-python"]


@contextmanager
def record_reader(name: str) -> Iterator[None]:
    """metaq.protocol.records reads with ``name`` (one of RECORD_READERS) inside the block; skips the test
    if that reader is not installed here."""
    if name == "compiled" and not records.COMPILED:
        pytest.skip("aiokafka's compiled record reader is not installed")
    with pytest.MonkeyPatch.context() as patch:
        if name == "pure-python":
            patch.setattr(records, "_CompiledBatch", None)
            patch.setattr(legacy, "_walk", None)
            patch.setattr(legacy, "_CompiledBuilder", None)
        yield


@pytest.fixture(autouse=True, scope="module", params=RECORD_READERS)
def each_record_reader(request: pytest.FixtureRequest) -> Iterator[str]:
    """Autouse in a module that imports it: each test there runs with each reader (module scope, so
    hypothesis tests may use it)."""
    with record_reader(request.param):
        yield request.param

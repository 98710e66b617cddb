"""RecordFuture: a concurrent.futures.Future whose fields are made on first use from its batch's shared
outcome; the public API must hold."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import CancelledError, Future, as_completed, wait

import pytest

from metaq.errors import NotLeaderForPartitionError
from metaq.producer.accumulator import BatchOutcome, RecordFuture, RecordMetadata
from metaq.protocol.builder import AddedRecord

MD = RecordMetadata("t", 2, 5, 1000)


def batch_futures(timestamps):
    outcome = BatchOutcome("t", 2)
    return outcome, [RecordFuture(outcome, AddedRecord(i, 100, ts)) for i, ts in enumerate(timestamps)]


def one_future():
    outcome, (future,) = batch_futures([1000])
    return outcome, future


def test_an_unused_future_is_two_fields():
    outcome, f = one_future()
    outcome.complete(5)
    assert "_condition" not in f.__dict__  # no condition, waiter or callback list was made
    assert isinstance(f, Future)
    assert f.done() and not f.cancelled() and f.result(0) == MD and f.exception(0) is None


def test_fail():
    outcome, f = one_future()
    error = NotLeaderForPartitionError("x")
    outcome.fail(error)
    assert f.exception(0) is error
    with pytest.raises(NotLeaderForPartitionError):
        f.result(0)


def test_outcomes_are_final():
    outcome, f = one_future()
    outcome.fail(NotLeaderForPartitionError("x"))
    outcome.complete(5)  # e.g. a response after a forced close failed the batch
    assert isinstance(f.exception(0), NotLeaderForPartitionError)


def test_a_waiting_thread_is_woken():
    outcome, f = one_future()
    threading.Timer(0.05, outcome.complete, args=(5,)).start()
    assert f.result(timeout=5) == MD


def test_result_times_out():
    _, f = one_future()
    with pytest.raises(TimeoutError):
        f.result(timeout=0.01)


def test_callbacks_before_and_after():
    outcome, f = one_future()
    seen = []
    f.add_done_callback(lambda fut: seen.append(("before", fut.result())))
    outcome.complete(5)
    f.add_done_callback(lambda fut: seen.append(("after", fut.result())))
    assert seen == [("before", MD), ("after", MD)]


def test_cancelled_future_stays_cancelled():
    outcome, f = one_future()
    assert f.cancel()
    outcome.complete(5)
    assert f.cancelled()
    with pytest.raises(CancelledError):
        f.result(0)


def test_a_finished_future_cannot_be_cancelled():
    outcome, f = one_future()
    outcome.complete(5)
    assert not f.cancel() and f.result(0) == MD


def test_wait_and_as_completed():
    outcome, futures = batch_futures([1000] * 10)
    first = BatchOutcome("t", 2)
    futures[0] = RecordFuture(first, AddedRecord(0, 100, 1000))
    first.complete(5)
    threading.Timer(0.05, outcome.complete, args=(5,)).start()
    done, not_done = wait(futures, timeout=5)
    assert len(done) == 10 and not not_done
    assert len(list(as_completed(futures, timeout=5))) == 10


def test_many_waiters_race_with_completion():
    """Threads materialise futures while their batches finish: every waiter is woken with its own offset."""
    batches = [batch_futures([1000] * 100) for _ in range(20)]
    results = []

    def waiter(part):
        results.extend(f.result(timeout=10).offset for f in part)

    futures = [f for _, fs in batches for f in fs]
    threads = [threading.Thread(target=waiter, args=(futures[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for n, (outcome, _) in enumerate(batches):
        outcome.complete(n * 1000)
    for t in threads:
        t.join(10)
    assert sorted(results) == sorted(n * 1000 + i for n in range(20) for i in range(100))


def test_only_the_watched_futures_are_notified():
    outcome, futures = batch_futures([10, 11, 12, 13])
    called = []
    futures[1].add_done_callback(lambda f: called.append(f.result()))
    futures[3].cancel()
    outcome.complete(100)
    assert called == [RecordMetadata("t", 2, 101, 11)]
    assert "_condition" not in futures[0].__dict__  # made when read, below
    assert futures[0].result(0) == RecordMetadata("t", 2, 100, 10)
    assert futures[2].result(0) == RecordMetadata("t", 2, 102, 12) and futures[2].exception(0) is None
    assert futures[3].cancelled()


def test_acks_0_and_log_append_time():
    outcome, futures = batch_futures([5, 6])
    outcome.complete(-1, 999)
    assert [f.result(0) for f in futures] == [RecordMetadata("t", 2, -1, 999)] * 2


def test_a_failed_future_has_no_result():
    outcome, f = one_future()
    outcome.fail(NotLeaderForPartitionError("gone"))
    with pytest.raises(NotLeaderForPartitionError):
        f.result(0)
    assert f._result is None


def test_the_outcome_does_not_keep_unwatched_futures_alive():
    """A dropped future is freed at once (by reference count, not the cyclic GC): the batch holds none."""
    outcome, (f,) = batch_futures([1000])
    ref = weakref.ref(f)
    gc.disable()
    try:
        del f
        assert ref() is None
    finally:
        gc.enable()
    outcome.complete(5)


def test_unknown_attributes_are_still_missing():
    _, f = one_future()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        f.nope  # noqa: B018
    assert "_condition" not in f.__dict__

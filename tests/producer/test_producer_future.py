"""RecordFuture: a concurrent.futures.Future whose condition is created lazily; the public API must hold."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, as_completed, wait

import pytest

from metaq.errors import NotLeaderForPartitionError
from metaq.producer.accumulator import BatchOutcome, RecordFuture, RecordMetadata, resolve_all

MD = RecordMetadata("t", 0, 5, 1000)


def test_resolve_without_waiters_needs_no_condition():
    f = RecordFuture()
    f.resolve(MD)
    assert f._lazy is None  # no condition, waiter or callback list was made
    assert f.done() and not f.cancelled() and f.result(0) == MD and f.exception(0) is None


def test_reject():
    f = RecordFuture()
    error = NotLeaderForPartitionError("x")
    f.reject(error)
    assert f.exception(0) is error
    with pytest.raises(NotLeaderForPartitionError):
        f.result(0)


def test_a_waiting_thread_is_woken():
    f = RecordFuture()
    threading.Timer(0.05, f.resolve, args=(MD,)).start()
    assert f.result(timeout=5) == MD


def test_result_times_out():
    with pytest.raises(TimeoutError):
        RecordFuture().result(timeout=0.01)


def test_callbacks_before_and_after():
    f = RecordFuture()
    seen = []
    f.add_done_callback(lambda fut: seen.append(("before", fut.result())))
    f.resolve(MD)
    f.add_done_callback(lambda fut: seen.append(("after", fut.result())))
    assert seen == [("before", MD), ("after", MD)]


def test_cancelled_future_stays_cancelled():
    f = RecordFuture()
    assert f.cancel()
    f.resolve(MD)
    assert f.cancelled()
    with pytest.raises(CancelledError):
        f.result(0)


def test_wait_and_as_completed():
    futures = [RecordFuture() for _ in range(10)]
    futures[0].resolve(MD)

    def finish_rest():
        for f in futures[1:]:
            f.resolve(MD)

    threading.Timer(0.05, finish_rest).start()
    done, not_done = wait(futures, timeout=5)
    assert len(done) == 10 and not not_done
    assert len(list(as_completed(futures, timeout=5))) == 10


def test_many_waiters_race_with_resolution():
    futures = [RecordFuture() for _ in range(2000)]
    results = []

    def waiter(part):
        results.extend(f.result(timeout=10) for f in part)

    threads = [threading.Thread(target=waiter, args=(futures[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for f in futures:
        f.resolve(MD)
    for t in threads:
        t.join(10)
    assert len(results) == 2000


def batch_futures(timestamps):
    outcome = BatchOutcome("t", 2)
    outcome.timestamps.extend(timestamps)
    return outcome, [RecordFuture(outcome, i) for i in range(len(timestamps))]


def test_resolve_all_notifies_only_the_watched_futures():
    outcome, futures = batch_futures([10, 11, 12, 13])
    called = []
    futures[1].add_done_callback(lambda f: called.append(f.result()))
    futures[3].cancel()
    resolve_all(futures, outcome, 100, -1)
    assert called == [RecordMetadata("t", 2, 101, 11)]
    assert futures[0]._lazy is None and futures[0]._value is None  # made when read, below
    assert futures[0].result(0) == RecordMetadata("t", 2, 100, 10)
    assert futures[2].result(0) == RecordMetadata("t", 2, 102, 12) and futures[2].exception(0) is None
    assert futures[3].cancelled()


def test_resolve_all_with_acks_0_and_log_append_time():
    outcome, futures = batch_futures([5, 6])
    resolve_all(futures, outcome, -1, 999)
    assert [f.result(0) for f in futures] == [RecordMetadata("t", 2, -1, 999)] * 2


def test_a_rejected_batch_future_has_no_result():
    _, futures = batch_futures([5])
    futures[0].reject(NotLeaderForPartitionError("gone"))
    with pytest.raises(NotLeaderForPartitionError):
        futures[0].result(0)
    assert futures[0]._result is None

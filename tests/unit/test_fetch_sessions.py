"""The listener's fetch session cache (txn_broker/kafka/fetch_sessions.py, KIP-227) on its
own: sessionless, full and incremental fetches, the epochs, forgotten partitions, which
partitions an incremental answer lists, the two session errors, and the bounded cache's
eviction."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from txn_broker.kafka.fetch_sessions import FetchSessionCache, PartitionFetch, next_epoch

NONE = ErrorCode.none


def wanted(*specs: tuple[str, int, int]) -> list[PartitionFetch]:
    return [PartitionFetch(t, p, offset, 1000) for t, p, offset in specs]


def answer(plan, topic: str, partition: int, records: int = 0, hw: int = 10, error: ErrorCode = NONE) -> bool:
    return plan.must_answer(topic, partition, error, records, hw, hw, 0)


def test_sessionless_full_and_incremental_fetches():
    cache = FetchSessionCache()
    sessionless = cache.plan(0, -1, "User:a", wanted(("t", 0, 5)), [])
    assert (sessionless.session_id, sessionless.incremental, len(cache)) == (0, False, 0)
    assert answer(sessionless, "t", 0)

    full = cache.plan(0, 0, "User:a", wanted(("t", 0, 5), ("t", 1, 7)), [])
    assert full.session_id != 0 and not full.incremental and len(cache) == 1
    assert answer(full, "t", 0) and answer(full, "t", 1)  # a full answer lists every partition

    # epoch 1: nothing sent, both fetched from the session's offsets; only news is answered
    first = cache.plan(full.session_id, 1, "User:a", [], [])
    assert first.incremental and [(p.partition, p.fetch_offset) for p in first.partitions] == [(0, 5), (1, 7)]
    assert not answer(first, "t", 0) and not answer(first, "t", 1)
    assert answer(first, "t", 0, records=3)
    assert answer(first, "t", 1, hw=11)  # a changed high watermark
    assert answer(first, "t", 1, hw=11, error=ErrorCode.offset_out_of_range)

    # epoch 2: partition 0 moved on, partition 1 forgotten, a new partition added
    second = cache.plan(full.session_id, 2, "User:a", wanted(("t", 0, 8), ("u", 0, 0)), [("t", 1)])
    assert [(p.topic, p.partition, p.fetch_offset) for p in second.partitions] == [("t", 0, 8), ("u", 0, 0)]
    assert answer(second, "u", 0)  # new to the session: the client has been told nothing yet

    # epoch -1 closes the session; epoch 0 naming one replaces it
    again = cache.plan(full.session_id, 0, "User:a", wanted(("t", 0, 8)), [])
    assert again.session_id not in (0, full.session_id) and len(cache) == 1
    closed = cache.plan(again.session_id, -1, "User:a", wanted(("t", 0, 8)), [])
    assert closed.session_id == 0 and len(cache) == 0


def test_session_errors():
    cache = FetchSessionCache()
    full = cache.plan(0, 0, "User:a", wanted(("t", 0, 0)), [])
    assert cache.plan(full.session_id + 1, 1, "User:a", [], []).error == ErrorCode.fetch_session_id_not_found
    assert cache.plan(0, 1, "User:a", [], []).error == ErrorCode.fetch_session_id_not_found
    assert cache.plan(full.session_id, 1, "User:b", [], []).error == ErrorCode.fetch_session_id_not_found
    assert cache.plan(full.session_id, 2, "User:a", [], []).error == ErrorCode.invalid_fetch_session_epoch
    assert cache.plan(full.session_id, -5, "User:a", [], []).error == ErrorCode.invalid_fetch_session_epoch
    assert cache.plan(full.session_id, 1, "User:a", [], []).error == NONE
    assert cache.plan(full.session_id, 1, "User:a", [], []).error == ErrorCode.invalid_fetch_session_epoch
    cache.plan(full.session_id, -1, "User:b", [], [])  # another principal cannot close it
    assert cache.plan(full.session_id, 2, "User:a", [], []).error == NONE
    assert next_epoch(2**31 - 1) == 1


def test_the_cache_is_bounded_and_evicts_stale_then_smaller_sessions():
    now = [0.0]
    cache = FetchSessionCache(slots=2, eviction_ms=1000, clock=lambda: now[0])
    a = cache.plan(0, 0, "User:a", wanted(("t", 0, 0), ("t", 1, 0)), []).session_id
    b = cache.plan(0, 0, "User:a", wanted(("t", 0, 0), ("t", 1, 0), ("t", 2, 0)), []).session_id
    # full, neither stale: a session no larger than the smallest gets none
    assert cache.plan(0, 0, "User:a", wanted(("t", 0, 0), ("t", 1, 0)), []).session_id == 0
    # a larger one takes the smallest's slot
    c = cache.plan(0, 0, "User:a", wanted(*[("t", i, 0) for i in range(3)]), []).session_id
    assert c != 0 and cache.evictions == 1
    assert cache.plan(a, 1, "User:a", [], []).error == ErrorCode.fetch_session_id_not_found
    # b used later than c: once both are stale, the least recently used (c) goes first
    now[0] = 5.0
    assert cache.plan(b, 1, "User:a", [], []).error == NONE
    now[0] = 6.5
    d = cache.plan(0, 0, "User:a", wanted(("t", 0, 0)), []).session_id
    assert d != 0 and cache.evictions == 2
    assert cache.plan(c, 1, "User:a", [], []).error == ErrorCode.fetch_session_id_not_found
    assert cache.plan(b, 2, "User:a", [], []).error == NONE
    assert FetchSessionCache(slots=0).plan(0, 0, "User:a", wanted(("t", 0, 0)), []).session_id == 0

"""The checks behind the sensors, shared by their poke (in the worker) and their triggers
(in the triggerer). Plain synchronous broker calls: triggers run them in a thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txn_broker import Broker, TopicPartition

def _partitions(broker: Broker, topics: list[str]) -> list[TopicPartition]:
    from txn_broker import TopicPartition

    return [TopicPartition(t, p.partition) for t in topics for p in broker.describe_topic(t).partitions]


def committed_records_available(broker: Broker, topics: list[str], group_id: str | None,
                                min_records: int = 1) -> int:
    """How many committed records (up to ``min_records``) exist past ``group_id``'s
    committed offsets (from the log start where it has none, or with no group).

    The offset lag below the last stable offset is an upper bound (it counts records of
    aborted transactions too), so when it is large enough the records are confirmed by
    reading at most ``min_records`` of them ``read_committed``."""
    partitions = _partitions(broker, topics)
    ends = broker.end_offsets(partitions)
    starts = broker.beginning_offsets(partitions)
    if group_id is not None:
        for tp, offset in broker.committed_offsets(group_id, partitions).items():
            if offset is not None:
                starts[tp] = max(offset, starts[tp])
    behind = {tp: starts[tp] for tp in partitions if ends[tp] > starts[tp]}
    if sum(ends[tp] - starts[tp] for tp in behind) < min_records:
        return sum(ends[tp] - starts[tp] for tp in behind)
    found = 0
    consumer = broker.consumer(isolation_level="read_committed")
    try:
        for tp, start in behind.items():
            consumer.assign([tp])
            consumer.seek(tp, start)
            while found < min_records and consumer.position(tp) < ends[tp]:
                before = consumer.position(tp)
                batch = consumer.poll(max_records=min_records - found)
                found += sum(1 for o in batch.column("_offset").to_pylist() if o < ends[tp])
                if consumer.position(tp) == before:
                    break
            if found >= min_records:
                break
    finally:
        consumer.close()
    return found


def run_sweeps(broker: Broker, expire_transactional_ids: bool = True) -> dict[str, Any]:
    """One pass of the coordinator's sweeps: abort transactions past their timeout
    (fencing their producers), roll forward decided ones, and (optionally) remove
    transactional ids idle past ``transactional_id_expiration_ms``. Idempotent."""
    aborted = broker.abort_expired_transactions()
    completed = broker.complete_prepared_transactions()
    result: dict[str, Any] = {
        "aborted": [a.transactional_id for a in aborted],
        "completed": [f"{a.transactional_id}: {a.action}" for a in completed],
        "expired_ids": [],
        "producer_states_removed": 0,
    }
    if expire_transactional_ids:
        expired = broker.expire_transactional_ids()
        result["expired_ids"] = [a.transactional_id for a in expired["transactional_ids"]]
        result["producer_states_removed"] = int(expired["producer_states_removed"] or 0)
    return result


def blocking_transactions(broker: Broker, topics: list[str] | None) -> list[dict[str, Any]]:
    """Open transactions that hold back a last stable offset: on ``topics`` (any age), or
    anywhere but only those past their own timeout when ``topics`` is None."""
    if topics is None:
        hanging = broker.find_hanging_transactions()
    else:
        wanted = set(topics)
        hanging = [h for h in broker.find_hanging_transactions(older_than_ms=0)
                   if any(tp.topic in wanted for tp in h.partitions)]
    return [{"transactional_id": h.transactional_id, "age_ms": h.age_ms, "timeout_ms": h.timeout_ms,
             "partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in h.partitions)} for h in hanging]


def merge_sweeps(total: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    """Accumulate what several sweep passes did."""
    merged = dict(total)
    for key in ("aborted", "completed", "expired_ids"):
        merged[key] = [*total.get(key, []), *one.get(key, [])]
    merged["producer_states_removed"] = total.get("producer_states_removed", 0) + one.get(
        "producer_states_removed", 0)
    return merged

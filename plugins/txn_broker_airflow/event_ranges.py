"""Offset ranges of committed records: what the event trigger announces and what the run
it starts processes, exactly once.

The trigger (:class:`~txn_broker_airflow.triggers.committed_records.CommittedRecordsEventTrigger`)
calls :func:`find_new_ranges`: per partition, from the consumer group's committed offset
(or the log start where it has none; or, later in the same triggerer, the end of the last
range it announced) up to the **last stable offset**, keeping only ranges that hold at
least one committed record read ``read_committed``. Records of an open transaction lie at
or past the LSO; records of an aborted one are never returned by a read_committed read.
So neither ever starts a run.

The run calls :func:`process_ranges` with the ranges of the asset events that started it:
one transaction, whose transactional id fences every older instance (a retry, a zombie,
a second run of the same task). Only after that fence does it read the group's committed
offsets: no other writer of this group's offsets can commit any more (one transactional
id per group, the task's own), so they are the truth. Per partition it processes
``[committed, end)`` where ``end`` is the largest end any of its events announced, sends
``end`` to the transaction as the group's next offset and commits, output and offsets
together. A range already committed (the same event twice, after a triggerer restart, or
overlapping events) is skipped; a gap before the event's start (a run that failed and never
committed) is processed too. Nothing is read twice, nothing skipped.

No Airflow imports: the same code runs in the triggerer, in a task and in the tests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .errors import EventPayloadError

if TYPE_CHECKING:
    from txn_broker import Broker, TopicPartition

#: the asset event ``extra`` key that says an event came from this trigger
EVENT_KIND = "txn_broker.committed_records"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """``[start, end)`` of one partition: every offset from ``start`` to ``end - 1``."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def event_id(group_id: str, ranges: Iterable[OffsetRange]) -> str:
    """A stable id of (group, ranges): the same ranges always give the same id, so an event
    announced twice (after a triggerer restart) is recognisable as such."""
    text = json.dumps([group_id, [[r.topic, r.partition, r.start, r.end] for r in sorted(ranges)]])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def event_payload(group_id: str, topics: list[str], ranges: list[OffsetRange]) -> dict[str, Any]:
    """The JSON payload of one event (it becomes the asset event's ``extra``)."""
    ordered = sorted(ranges)
    return {
        "kind": EVENT_KIND,
        "event_id": event_id(group_id, ordered),
        "group_id": group_id,
        "topics": list(topics),
        "ranges": [asdict(r) for r in ordered],
        "offsets": sum(r.end - r.start for r in ordered),
    }


def payload_of(extra: Mapping[str, Any]) -> Mapping[str, Any]:
    """The event payload in an asset event's ``extra`` (Airflow stores a trigger's event as
    ``{"from_trigger": true, "payload": ...}``), or ``extra`` itself when it is a payload."""
    if isinstance(extra, Mapping) and isinstance(extra.get("payload"), Mapping):
        return extra["payload"]  # type: ignore[no-any-return]
    return extra


def is_event(extra: Mapping[str, Any] | None) -> bool:
    """Whether an asset event's ``extra`` is (or wraps) a committed-records event."""
    return isinstance(extra, Mapping) and payload_of(extra).get("kind") == EVENT_KIND


def ranges_from_payload(payload: Mapping[str, Any]) -> tuple[str, list[OffsetRange]]:
    """(group id, ranges) of an event payload (or an asset event's ``extra`` wrapping one);
    EventPayloadError when it is not one."""
    payload = payload_of(payload)
    if not isinstance(payload, Mapping) or payload.get("kind") != EVENT_KIND:
        raise EventPayloadError(f"not a committed-records event: {payload!r:.200}")
    try:
        group = str(payload["group_id"])
        ranges = [OffsetRange(str(r["topic"]), int(r["partition"]), int(r["start"]), int(r["end"]))
                  for r in payload["ranges"]]
    except (KeyError, TypeError, ValueError) as error:
        raise EventPayloadError(f"malformed committed-records event: {error}") from None
    if any(r.start < 0 or r.end < r.start for r in ranges):
        raise EventPayloadError(f"malformed committed-records event: bad range in {ranges}")
    return group, ranges


def _tp(topic: str, partition: int) -> TopicPartition:
    from txn_broker import TopicPartition

    return TopicPartition(topic, partition)


def read_range(broker: Broker, r: OffsetRange, limit: int | None = None) -> pa.Table:
    """The committed records of ``r`` (read_committed: never an aborted transaction's),
    at most ``limit`` of them."""
    consumer = broker.consumer(isolation_level="read_committed")
    tables: list[pa.Table] = []
    found = 0
    try:
        tp = _tp(r.topic, r.partition)
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        while consumer.position(tp) < r.end and (limit is None or found < limit):
            before = consumer.position(tp)
            batch = consumer.poll(max_records=10_000)
            if batch.num_rows:
                offsets = batch.column("_offset")
                batch = batch.filter(pa.compute.less(offsets, r.end))
                if limit is not None:
                    batch = batch.slice(0, limit - found)
                tables.append(batch)
                found += batch.num_rows
            if consumer.position(tp) == before:
                break  # nothing more below the LSO
    finally:
        consumer.close()
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def find_new_ranges(broker: Broker, topics: list[str], group_id: str,
                    cursor: dict[tuple[str, int], int]) -> list[OffsetRange]:
    """Ranges of every partition of ``topics`` that hold committed records past both the
    group's committed offset and ``cursor`` (the ends already announced), up to the LSO.
    Updates ``cursor`` for partitions whose new range holds no committed record (aborted
    transactions, markers), so they are not read again."""
    from txn_broker import TopicPartition

    partitions = [TopicPartition(t, p.partition) for t in topics for p in broker.describe_topic(t).partitions]
    stable = broker.end_offsets(partitions)  # read_committed: the last stable offsets
    starts = broker.beginning_offsets(partitions)
    for tp, offset in broker.committed_offsets(group_id, partitions).items():
        if offset is not None:
            starts[tp] = max(offset, starts[tp])
    found = []
    for tp in partitions:
        start = max(starts[tp], cursor.get((tp.topic, tp.partition), 0))
        end = stable[tp]
        if end <= start:
            continue
        r = OffsetRange(tp.topic, tp.partition, start, end)
        if read_range(broker, r, limit=1).num_rows:
            found.append(r)
        else:
            cursor[r.tp] = end
    return found


def merge_events(payloads: Iterable[Mapping[str, Any]]) -> tuple[str, dict[tuple[str, int], OffsetRange], list[str]]:
    """(group id, widest range per partition, event ids) of the events a run consumed.
    All events must name the same group."""
    groups: set[str] = set()
    merged: dict[tuple[str, int], OffsetRange] = {}
    ids: list[str] = []
    for payload in payloads:
        group, ranges = ranges_from_payload(payload)
        groups.add(group)
        ids.append(str(payload_of(payload).get("event_id") or event_id(group, ranges)))
        for r in ranges:
            old = merged.get(r.tp)
            merged[r.tp] = r if old is None else OffsetRange(
                r.topic, r.partition, min(old.start, r.start), max(old.end, r.end))
    if len(groups) != 1:
        raise EventPayloadError(f"a run processes the events of one consumer group, got {sorted(groups) or 'none'}")
    return groups.pop(), merged, ids


#: ``transform(records, event_ids)``: the output records of committed input records (with
#: their ``_topic``, ``_partition``, ``_offset``, ``_timestamp`` columns)
Transform = Callable[[pa.Table, list[str]], pa.Table]


def run_events(context: Mapping[str, Any], asset: Any = None) -> list[dict[str, Any]]:
    """The committed-records event payloads that started this DAG run (of ``asset`` only,
    when given), from ``context["triggering_asset_events"]``; when there are none, the
    payloads in ``params["events"]`` (``dag.test()``, manual runs)."""
    found: list[dict[str, Any]] = []
    uri = getattr(asset, "uri", None)
    triggering = context.get("triggering_asset_events") or {}
    for key, asset_events in triggering.items():
        for ev in asset_events:
            ev_uri = getattr(getattr(ev, "asset", None), "uri", None) or getattr(key, "uri", None)
            if uri is not None and ev_uri not in (None, uri):
                continue
            extra = getattr(ev, "extra", None)
            if extra is not None and is_event(extra):
                found.append(dict(payload_of(extra)))
    if not found:
        found = [dict(payload_of(p)) for p in (context.get("params") or {}).get("events") or [] if is_event(p)]
    return found


def process_ranges(broker: Broker, *, transactional_id: str, events: list[Mapping[str, Any]],
                   output_topic: str, transform: Transform, key: str | None = None,
                   transaction_timeout_ms: int | None = None,
                   on_init: Callable[[int | None], None] | None = None) -> dict[str, Any]:
    """Process the committed records the ``events`` announced, exactly once (see the module
    docstring): fence, read the group's committed offsets, read ``[committed, end)`` per
    partition read_committed, write ``transform(records)`` to ``output_topic`` and commit it
    with the new group offsets in one transaction. Returns a JSON-able summary; ``outcome``
    is ``"committed"``, ``"nothing to do"`` when every range was already committed, or
    ``"no event"`` when ``events`` is empty."""
    if not events:
        return {"transactional_id": transactional_id, "outcome": "no event", "event_ids": [],
                "records_in": 0, "records_out": 0}
    group_id, merged, ids = merge_events(events)
    if transaction_timeout_ms is None:  # a stage: the broker's stage default
        transaction_timeout_ms = broker.settings.stage_transaction_timeout_ms
    producer = broker.producer(transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms)
    summary: dict[str, Any] = {"transactional_id": transactional_id, "group_id": group_id, "event_ids": ids,
                               "announced": [asdict(r) for r in sorted(merged.values())]}
    try:
        producer.init_transactions()  # fences every older instance; its transaction is finished
        if on_init is not None:
            on_init(producer.epoch)
        summary["producer_id"], summary["producer_epoch"] = producer.producer_id, producer.epoch
        tps = [_tp(*k) for k in sorted(merged)]
        committed = broker.committed_offsets(group_id, tps)
        low = broker.beginning_offsets(tps)
        todo: list[OffsetRange] = []
        skipped: list[dict[str, Any]] = []
        for tp in tps:
            announced = merged[(tp.topic, tp.partition)]
            done = committed[tp]
            # no committed offset yet: from the log start, as the trigger announced it
            start = low[tp] if done is None else max(done, low[tp])
            if start >= announced.end:
                skipped.append({**asdict(announced), "committed": done})
                continue
            todo.append(OffsetRange(tp.topic, tp.partition, start, announced.end))
        summary["processed"] = [asdict(r) for r in todo]
        summary["already_committed"] = skipped
        if not todo:
            summary.update(outcome="nothing to do", records_in=0, records_out=0)
            return summary
        producer.begin_transaction()
        records_in = records_out = 0
        for r in todo:
            table = read_range(broker, r)
            records_in += table.num_rows
            if table.num_rows:
                out = transform(table, ids)
                if out.num_rows:
                    producer.send(output_topic, out, key=key)
                    records_out += out.num_rows
        producer.send_offsets_to_transaction({_tp(r.topic, r.partition): r.end for r in todo}, group_id)
        producer.commit_transaction()
        summary.update(outcome="committed", records_in=records_in, records_out=records_out)
        return summary
    except BaseException:
        if producer.can_abort:
            producer.abort_transaction()
        raise
    finally:
        producer.close()

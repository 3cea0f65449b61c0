"""What the Transactions page shows, as JSON-ready dicts built from the broker's admin API.

Pure functions of a :class:`txn_broker.Broker` (and, for the DAG a transaction belongs
to, a set of known DAG ids): no Airflow imports, no HTTP. The JSON API
(``api.py``) returns these dicts as they are; their keys are the API's contract,
documented in ``docs/ui.md``.

Times are milliseconds since the epoch from the broker database's clock (``now_ms`` is
in every answer, so ages never depend on the clock of the machine running the UI).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from txn_broker import (
    TransactionDescription,
    TransactionSummary,
    field_id,
    is_hanging,
    is_open,
    open_age_ms,
    state_sets,
)
from txn_broker.errors import UnknownTransactionalIdError

from ..ids import default_transactional_id

if TYPE_CHECKING:
    from txn_broker import Broker

#: every state a transactional id can be in, in the order the page offers them, and the
#: open ones (txn_broker.states is their one home; the page fetches them from the API)
STATES = state_sets()["states"]
OPEN = state_sets()["open"]
#: how many rows the list answers at most (the page says when there are more)
DEFAULT_LIMIT = 500
#: open transactions described per topic page, to name what holds back its LSO
MAX_OPEN_DESCRIBED = 50


def states() -> dict[str, list[str]]:
    """The states and their classes, from txn_broker.states: ``states`` (all, in order),
    ``listed`` (those a listed id can be in: the filter's choices), ``open``, ``prepared``,
    ``idle``."""
    return state_sets()


# -- which DAG and task a transactional id belongs to ------------------------------------


@dataclass(frozen=True)
class Attribution:
    """The DAG and task of a transactional id following the ``{dag_id}.{task_id}[.{map_index}]``
    convention (``txn_broker_airflow.ids``). ``dag_known``: ``dag_id`` is a DAG Airflow
    knows (and the user may read); otherwise it is a guess (the text before the first dot)."""

    dag_id: str | None
    task_id: str | None
    map_index: int | None
    dag_known: bool

    def as_dict(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "task_id": self.task_id, "map_index": self.map_index,
                "dag_known": self.dag_known}


def attribute(transactional_id: str, known_dag_ids: Iterable[str] = ()) -> Attribution:
    """Split ``transactional_id`` into DAG, task and map index.

    DAG and task ids may both contain dots (task groups make ``group.task`` task ids), so
    the longest known DAG id that prefixes the id wins; without one, the DAG is the text
    before the first dot. A last dot-separated part made of digits is the map index. Ids
    that do not follow the convention (no dot) belong to no DAG."""
    dag_id = max((d for d in known_dag_ids if transactional_id.startswith(f"{d}.")), key=len, default=None)
    known = dag_id is not None
    if dag_id is None:
        if "." not in transactional_id.strip("."):
            return Attribution(None, None, None, False)
        dag_id = transactional_id.split(".", 1)[0]
        if not dag_id:
            return Attribution(None, None, None, False)
    rest = transactional_id[len(dag_id) + 1:]
    map_index = None
    head, _, last = rest.rpartition(".")
    if head and last.isdigit() and last.isascii():
        rest, map_index = head, int(last)
    return Attribution(dag_id, rest or None, map_index, known)


# -- transactions ------------------------------------------------------------------------


def _outcome_word(state: str, outcome: str | None) -> str | None:
    """What happened to the id's current transaction: committed, aborted, open, or None
    (no transaction yet)."""
    if is_open(state):
        return {"PrepareCommit": "committing", "PrepareAbort": "aborting",
                "PrepareEpochFence": "aborting"}.get(state, "open")
    return {"COMMIT": "committed", "ABORT": "aborted"}.get(outcome or "")


def transaction_row(summary: TransactionSummary, attribution: Attribution) -> dict[str, Any]:
    """One row of the list: id, DAG/task, state, epoch, age against timeout, size, outcome."""
    age = summary.age_ms
    return {
        "transactional_id": summary.transactional_id,
        **attribution.as_dict(),
        "state": summary.state,
        "open": is_open(summary.state),
        "producer_id": summary.producer_id,
        "producer_epoch": summary.producer_epoch,
        "timeout_ms": summary.timeout_ms,
        "txn_id": summary.txn_id,
        "start_ms": summary.txn_start_ms,
        "last_update_ms": summary.last_update_ms,
        "end_ms": summary.end_ms,
        "age_ms": age,
        "hanging": summary.is_hanging,
        "partition_count": int(summary.partition_count),
        "record_count": int(summary.record_count),
        "size_bytes": int(summary.size_bytes),
        "outcome": _outcome_word(summary.state, summary.outcome),
    }


def _row_order(row: dict[str, Any]) -> tuple[int, int, str]:
    """Hanging first, then other open ones, then the rest; newest activity first."""
    rank = 0 if row["hanging"] else 1 if row["open"] else 2
    return (rank, -int(row["last_update_ms"] or 0), row["transactional_id"])


def list_transactions(broker: Broker, known_dag_ids: Iterable[str] = (), *,
                      states: Sequence[str] = (), text: str = "", dag_id: str = "",
                      hanging_only: bool = False, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """The transactions list, filtered. ``states``: any of :data:`STATES` (empty: all);
    ``text``: a case-insensitive substring of the transactional id; ``dag_id``: rows
    attributed to that DAG. Raises InvalidInputError for an unknown state."""
    known = sorted(set(known_dag_ids))
    summaries = broker.list_transactions(list(states) if states else None)
    needle = text.strip().lower()
    rows, dags = [], set()
    for summary in summaries:
        attribution = attribute(summary.transactional_id, known)
        if attribution.dag_id:
            dags.add(attribution.dag_id)
        if needle and needle not in summary.transactional_id.lower():
            continue
        if dag_id and attribution.dag_id != dag_id:
            continue
        if hanging_only and not summary.is_hanging:
            continue
        rows.append(transaction_row(summary, attribution))
    rows.sort(key=_row_order)
    now_ms = summaries[0].now_ms if summaries else broker.now_ms()
    return {
        "now_ms": now_ms,
        "total": len(rows),
        "truncated": len(rows) > limit,
        "transactions": rows[:limit],
        "hanging_count": sum(1 for r in rows if r["hanging"]),
        "open_count": sum(1 for r in rows if r["open"]),
        "states": STATES,
        "dag_ids": sorted(dags | set(known)),
    }


def transaction_detail(broker: Broker, transactional_id: str, known_dag_ids: Iterable[str] = ()
                       ) -> dict[str, Any]:
    """Everything about one transactional id: its current transaction (partitions with offset
    ranges and markers, group offsets sent, segments), the state history as a timeline,
    and its earlier transactions. Raises UnknownTransactionalIdError, InvalidNameError."""
    d: TransactionDescription = broker.describe_transaction(transactional_id)
    now_ms = broker.now_ms()
    age = open_age_ms(d.state, d.start_ms, now_ms)
    history = [{"from_state": h.from_state, "to_state": h.to_state, "at_ms": h.at_ms,
                "producer_id": h.producer_id, "producer_epoch": h.producer_epoch, "txn_id": h.txn_id,
                "reason": h.reason} for h in d.history]
    current = next((t for t in d.transactions if t.get("txn_id") == d.txn_id), None)
    return {
        "now_ms": now_ms,
        "transactional_id": d.transactional_id,
        **attribute(d.transactional_id, known_dag_ids).as_dict(),
        "state": d.state,
        "open": is_open(d.state),
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "timeout_ms": d.timeout_ms,
        "txn_id": d.txn_id,
        "start_ms": d.start_ms,
        "end_ms": current.get("end_ms") if current else None,
        "last_update_ms": d.last_update_ms,
        "age_ms": age,
        "hanging": is_hanging(d.state, d.start_ms, d.timeout_ms, now_ms),
        "outcome": _outcome_word(d.state, current.get("outcome") if current else None),
        "record_count": sum(int(p.record_count) for p in d.partitions),
        "size_bytes": sum(int(p.size_bytes) for p in d.partitions),
        "partitions": [{"topic": p.topic, "partition": p.partition, "first_offset": p.first_offset,
                        "last_offset": p.last_offset, "record_count": int(p.record_count),
                        "size_bytes": int(p.size_bytes), "marker": p.marker, "marker_offset": p.marker_offset,
                        "marker_ms": p.marker_ms} for p in d.partitions],
        "group_offsets": [{"group_id": o["group_id"], "topic": o["topic"], "partition": o["partition_no"],
                           "offset": o["committed_offset"]} for o in d.pending_offsets],
        "segments": [{"topic": s["topic"], "partition": s["partition_no"], "base_offset": s["base_offset"],
                      "record_count": int(s["record_count"]), "size_bytes": int(s["size_bytes"]),
                      "object_key": s["object_key"]} for s in d.segments],
        "history": history,
        "transactions": [{"txn_id": t["txn_id"], "producer_id": t["producer_id"],
                          "producer_epoch": t["producer_epoch"], "timeout_ms": t["timeout_ms"],
                          "start_ms": t["start_ms"], "end_ms": t["end_ms"],
                          "outcome": _outcome_word("", t["outcome"]) or "open"} for t in d.transactions],
    }


def task_instance_transaction(broker: Broker, dag_id: str, task_id: str, map_index: int | None,
                              known_dag_ids: Iterable[str] = ()) -> dict[str, Any]:
    """The transactional id a task instance uses by default, whether the broker has it, and
    the ids attributed to the same task (other map indexes, or ids the task set itself
    when they follow the convention)."""
    tid = default_transactional_id(dag_id, task_id, map_index if map_index is not None else -1)
    try:
        broker.describe_transaction(tid)
        exists = True
    except UnknownTransactionalIdError:
        exists = False
    known = set(known_dag_ids) | {dag_id}
    candidates = []
    for summary in broker.list_transactions():
        a = attribute(summary.transactional_id, known)
        if a.dag_id == dag_id and a.task_id == task_id and summary.transactional_id != tid:
            candidates.append(summary.transactional_id)
    return {"transactional_id": tid, "exists": exists, "candidates": sorted(candidates),
            "dag_id": dag_id, "task_id": task_id, "map_index": map_index}


# -- topics ------------------------------------------------------------------------------


def _partition_dict(p: Any) -> dict[str, Any]:
    hw, lso, start = int(p.high_watermark), int(p.last_stable_offset), int(p.log_start_offset)
    return {"partition": p.partition, "log_start_offset": start, "high_watermark": hw,
            "last_stable_offset": lso, "lso_lag": hw - lso, "records": hw - start,
            "segment_count": int(p.segment_count), "size_bytes": int(p.size_bytes)}


def iceberg_figures(broker: Broker, topics: Iterable[str] | None = None) -> tuple[dict[str, Any], str | None]:
    """``({topic: TableStatus}, error)`` for the ``iceberg.enabled`` topics among ``topics``
    (default: all): what ``txn-broker iceberg status`` shows. A catalog that cannot be read
    costs the Iceberg columns only: ``error`` names the error's class, the rest of the page
    stays."""
    from txn_broker.errors import TxnBrokerError

    try:
        if topics is not None:
            wanted = list(topics)
            enabled = [t for t in wanted if _iceberg_enabled(broker, t)]
            if not enabled:
                return {}, None
            return {s.topic: s for s in broker.iceberg_status(enabled)}, None
        return {s.topic: s for s in broker.iceberg_status()}, None
    except TxnBrokerError as error:
        return {}, type(error).__name__


def _iceberg_enabled(broker: Broker, topic: str) -> bool:
    return str(broker.describe_topic(topic).config.get("iceberg.enabled", False)).lower() == "true"


def _iceberg_partitions(status: Any) -> dict[int, dict[str, Any]]:
    return {p.partition: {"published_offset": p.published_offset, "last_stable_offset": p.last_stable_offset,
                          "offsets_behind": p.offsets_behind, "seconds_behind": p.seconds_behind}
            for p in status.partitions}


def list_topics(broker: Broker) -> dict[str, Any]:
    """Every topic with totals over its partitions: records retained, bytes, segments, and
    how far the last stable offsets lag behind the high watermarks; for a topic with
    ``iceberg.enabled``, its table and how far behind the last stable offsets it is."""
    tables, iceberg_error = iceberg_figures(broker)
    topics = []
    for name in broker.list_topics():
        d = broker.describe_topic(name)
        parts = [_partition_dict(p) for p in d.partitions]
        status = tables.get(name)
        topics.append({
            "name": d.name, "partition_count": len(parts), "created_ms": d.created_ms,
            "records": sum(p["records"] for p in parts),
            "high_watermark": sum(p["high_watermark"] for p in parts),
            "size_bytes": sum(p["size_bytes"] for p in parts),
            "segment_count": sum(p["segment_count"] for p in parts),
            "lso_lag": sum(p["lso_lag"] for p in parts),
            "held_partitions": sum(1 for p in parts if p["lso_lag"] > 0),
            "iceberg": None if status is None else {
                "table": status.table, "snapshot_id": status.snapshot_id,
                "offsets_behind": sum(p.offsets_behind for p in status.partitions),
                "seconds_behind": status.seconds_behind},
        })
    return {"now_ms": broker.now_ms(), "topics": topics, "iceberg_error": iceberg_error}


def topic_detail(broker: Broker, name: str, known_dag_ids: Iterable[str] = ()) -> dict[str, Any]:
    """One topic per partition (log start, high watermark, last stable offset and its lag,
    segments, bytes), its schema and configs, and the open transactions writing to it:
    the ones that hold its last stable offsets back. Raises UnknownTopicOrPartitionError."""
    d = broker.describe_topic(name)
    holders = []
    open_ids = broker.list_transactions(OPEN)
    for summary in open_ids[:MAX_OPEN_DESCRIBED]:
        try:
            txn = broker.describe_transaction(summary.transactional_id, history_limit=1)
        except UnknownTransactionalIdError:  # expired between the two reads
            continue
        mine = [p for p in txn.partitions if p.topic == name]
        if not mine:
            continue
        holders.append({
            "transactional_id": txn.transactional_id,
            **attribute(txn.transactional_id, known_dag_ids).as_dict(),
            "state": txn.state, "txn_id": txn.txn_id, "start_ms": txn.start_ms,
            "age_ms": summary.age_ms, "timeout_ms": txn.timeout_ms, "hanging": summary.is_hanging,
            "partitions": [{"partition": p.partition, "first_offset": p.first_offset,
                            "last_offset": p.last_offset, "record_count": int(p.record_count)} for p in mine],
        })
    tables, iceberg_error = iceberg_figures(broker, [name])
    status = tables.get(name)
    iceberg = _iceberg_partitions(status) if status is not None else {}
    partitions = [_partition_dict(p) for p in d.partitions]
    for row in partitions:
        row["iceberg"] = iceberg.get(row["partition"])
    return {
        "now_ms": broker.now_ms(),
        "name": d.name,
        "created_ms": d.created_ms,
        "iceberg": None if status is None else {
            "table": status.table, "snapshot_id": status.snapshot_id, "snapshot_ms": status.snapshot_ms,
            "seconds_behind": status.seconds_behind},
        "iceberg_error": iceberg_error,
        "config": dict(d.config),
        "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable, "id": field_id(f)}
                   for f in d.schema],
        "schema_version": d.schema_version,
        "schema_versions": [{"version": v.version, "created_ms": v.created_ms, "created_by": v.created_by,
                             "columns": [f"{f.name} {f.type}" for f in v.schema]}
                            for v in reversed(d.schema_versions)],
        "partitions": partitions,
        "open_transactions": holders,
        "open_transactions_truncated": len(open_ids) > MAX_OPEN_DESCRIBED,
    }


# -- consumer groups ---------------------------------------------------------------------


def _group_partition(p: Any, lag_seconds: dict[tuple[str, int], float]) -> dict[str, Any]:
    return {"topic": p.topic, "partition": p.partition, "committed_offset": int(p.committed_offset),
            "log_start_offset": int(p.log_start_offset), "high_watermark": int(p.high_watermark),
            "last_stable_offset": int(p.last_stable_offset), "lag": int(p.lag),
            "lag_uncommitted": int(p.lag_uncommitted), "commit_ms": p.commit_ms,
            "lag_seconds": lag_seconds.get((p.topic, p.partition), 0.0)}


def _lag_seconds(broker: Broker, group_id: str | None = None) -> dict[str, dict[tuple[str, int], float]]:
    """``{group: {(topic, partition): seconds}}``: the exporter's
    ``txn_broker_consumer_group_lag_seconds`` (``Broker.metrics_figures``), the age of the
    oldest committed record each group has not consumed."""
    out: dict[str, dict[tuple[str, int], float]] = {}
    for g in broker.metrics_figures().groups:
        if group_id is None or g.group == group_id:
            out.setdefault(g.group, {})[(g.topic, g.partition)] = g.lag_seconds
    return out


def list_groups(broker: Broker) -> dict[str, Any]:
    """Every consumer group with its topics, total lag (against the last stable offsets:
    what a read_committed consumer can still read), the age of its oldest unconsumed
    committed record (the exporter's lag in seconds) and last commit."""
    from txn_broker.errors import UnknownGroupError

    seconds = _lag_seconds(broker)
    groups = []
    for group_id in broker.list_groups():
        try:
            g = broker.describe_group(group_id)
        except UnknownGroupError:  # its offsets went with a deleted topic meanwhile
            continue
        groups.append({
            "group_id": g.group_id,
            "topics": sorted({p.topic for p in g.partitions}),
            "partition_count": len(g.partitions),
            "lag": int(g.lag),
            "lag_uncommitted": sum(int(p.lag_uncommitted) for p in g.partitions),
            "last_commit_ms": max((p.commit_ms for p in g.partitions), default=None),
            "lag_seconds": max(seconds.get(g.group_id, {}).values(), default=0.0),
        })
    return {"now_ms": broker.now_ms(), "groups": groups}


def group_detail(broker: Broker, group_id: str) -> dict[str, Any]:
    """One group's committed offset and lag per partition. Raises UnknownGroupError."""
    g = broker.describe_group(group_id)
    seconds = _lag_seconds(broker, group_id).get(group_id, {})
    return {"now_ms": broker.now_ms(), "group_id": g.group_id, "lag": int(g.lag),
            "lag_seconds": max(seconds.values(), default=0.0),
            "partitions": [_group_partition(p, seconds) for p in g.partitions]}

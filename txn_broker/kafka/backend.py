"""The one place where Kafka's protocol meets the broker: every call into the broker's
internals (topics, coordinator, segments, group offsets) is made here, in the broker's
own terms; the handlers speak only protocol and call these methods (from worker threads:
each one blocks on the database or the object store).

Semantics are the broker's, unchanged: a produced batch becomes one segment registered
with the coordinator's fencing and sequence checks (sequences numbered per record, as
Kafka's are), a transactional produce joins the transaction open for its transactional id,
and fetches read the same segments and visibility as the Python consumer.

Records (docs/kafka-protocol.md): a topic of Kafka's record shape (the default schema:
key, value, headers) stores each record as it is. A topic with a user schema stores each
record's value, a JSON object, as one row validated against the schema (a bad value fails
the batch with INVALID_RECORD, nothing written); it is read back as that row in JSON, with
the ``key`` column, if the schema has one, as the record key.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import decimal
import json
import logging
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy import exc as sa_exc

from ..broker import Broker
from ..consumer import commit_offsets
from ..errors import (
    DatabaseUnavailableError,
    InvalidPartitionsError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    SchemaMismatchError,
    StorageUnavailableError,
    TxnBrokerError,
    UnknownGroupError,
    UnknownTopicOrPartitionError,
)
from ..log.batches import DEFAULT_SCHEMA, check_record_sizes
from ..log.partition import READ_COMMITTED, READ_UNCOMMITTED, PlannedSegment, plan_fetch
from ..log.reader import SegmentCache, prefetch_pool, read_rows, row_offsets
from ..log.segment_format import OFFSET_COLUMN, TIMESTAMP_TYPE
from ..log.segment_writer import stage_segment, write_segment
from ..log.time_range import check_time_range
from ..log.types import ProducerIdentity, SegmentWrite, TransactionHandle
from ..models import OffsetAndMetadata, TopicPartition
from ..names import validate_partition
from ..retry import retrying
from ..states import TxnState
from ..topic_configs import KAFKA_IGNORED_CONFIGS, check_changes, defaults, validate_config
from ..topic_schemas import conform_send
from ..topics import TopicMeta
from .acls import AclBinding, AclFilter, PatternType, Permission
from .authorizer import Operation, ResourceType
from .errors import NotCoordinatorError
from .recordbatch import Batch, RecordColumns, control_batch, encode_columns_parts

log = logging.getLogger(__name__)

#: bytes (about) per record batch of a fetch response: each batch costs a fixed amount of
#: work to encode, and clients take batches of any size
FETCH_BATCH_BYTES = 16 * 1024 * 1024
#: a record batch's header (61 bytes), and a record's framing beside its key, value and headers at
#: most (length, attributes, timestamp and offset deltas, key and value lengths, header count):
#: a Fetch keeps to its max_bytes with them
BATCH_HEADER_BYTES = 61
RECORD_FRAMING_BYTES = 32
#: segments of a partition read ahead of its next Fetch (counting one it has begun)
READ_AHEAD_SEGMENTS = 3
#: segments read ahead of Fetch requests at most (the oldest not taken are dropped)
MAX_READ_AHEAD = 16
MAX_EPOCH = 32767


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class ListenerRow:
    """A listener as ``kafka_listeners`` holds it: its node, the age of its last heartbeat
    and of its current term, in milliseconds by the database's clock (cluster_view.py)."""

    node: Node
    age_ms: int
    term_ms: int
    #: when its term began, by the database's clock (the term's identity)
    started_ms: int = 0


@dataclass(frozen=True)
class ListenerTerm:
    """A listener's term (ListenerRow.started_ms), and when a listener is taken as down."""

    node_id: int
    started_ms: int
    expiry_ms: int


#: a check run in a request's database transaction, once the transactional id is locked: it
#: refuses the request by raising (the client gave up on it: kafka/peer.py)
Check = Callable[[Any], None]


def _check_term(term: ListenerTerm, tx: Any) -> None:
    if tx.scalar("kafka_listener_in_term", node_id=term.node_id, started_ms=term.started_ms,
                 expiry_ms=term.expiry_ms) is None:
        raise NotCoordinatorError(f"listener {term.node_id} was taken as down since it checked the group member")


def _checks(term: ListenerTerm | None, check: Check | None) -> Check | None:
    """The coordinator's term (if the request was checked in one), then ``check``."""
    if term is None:
        return check

    def both(tx: Any) -> None:
        _check_term(term, tx)
        if check is not None:
            check(tx)

    return both


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    #: Kafka's topic id (Metadata v10+, CreateTopics v7): a topic deleted and created again
    #: under its name has another, so a client sees a new topic (librdkafka then drops the
    #: partitions the old one had beyond the new count)
    topic_id: uuid.UUID = uuid.UUID(int=0)


def kafka_topic_id(topic_id: int, created_ms: int) -> uuid.UUID:
    """A topic's Kafka id, from its id in the metadata database (never reused) and its
    creation time (so a new database's topics differ too): never zero (created_ms > 0), the same on every
    listener."""
    return uuid.UUID(int=(topic_id & (2**64 - 1)) << 64 | (created_ms & (2**64 - 1)))


@dataclass(frozen=True)
class FetchResult:
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: the record batches in parts, to be written one after the other (not joined: megabytes)
    records: list[bytes | memoryview]

    @property
    def size(self) -> int:
        return sum(len(part) for part in self.records)


@dataclass(frozen=True)
class ProducerInfo:
    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp_ms: int
    #: the first offset of its transaction open on the partition (-1: none)
    txn_start_offset: int


@dataclass(frozen=True)
class ProduceResult:
    base_offset: int
    log_start_offset: int
    duplicate: bool


@dataclass(frozen=True)
class PreparedProduce:
    """A batch checked and uploaded, not yet registered."""

    topic: str
    partition: int
    transactional: bool
    idempotent: bool
    producer_id: int
    epoch: int
    write: SegmentWrite


def _isolation(level: int) -> str:
    return READ_COMMITTED if level == 1 else READ_UNCOMMITTED


class KafkaBackend:
    """The broker as Kafka's protocol sees it."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._cache = SegmentCache(broker._store, max_bytes=128 * 1024 * 1024)
        #: segments being loaded ahead of the Fetch requests that will read them
        self._ahead: OrderedDict[str, Future[pa.Table]] = OrderedDict()
        self._ahead_lock = threading.Lock()
        #: producer id of the writes of non-idempotent clients (acks without a producer id)
        self._anonymous_pid: int | None = None

    # -- the listeners of the cluster -------------------------------------------------------

    def register_listener(self, host: str, port: int, expiry_ms: int, settle_ms: int) -> int:
        """This listener's node id (the same for the same address across restarts); its term
        begins (see cluster_view.py: a listener taken as down after ``expiry_ms``, a term
        settled after ``settle_ms``)."""
        last: Exception | None = None
        for _attempt in range(10):
            try:
                return int(self.broker._db.run(lambda tx: tx.scalar(
                    "register_kafka_listener", host=host, port=port, expiry_ms=expiry_ms, settle_ms=settle_ms)))
            except (TxnBrokerError, sa_exc.IntegrityError) as error:
                # listeners starting at once may pick the same next id (an IntegrityError on
                # PostgreSQL): each tries again after its own short while
                last = error
                time.sleep(random.uniform(0.02, 0.2))
        if isinstance(last, TxnBrokerError):
            raise last
        raise DatabaseUnavailableError(f"could not register the listener {host}:{port}: {last}")

    def listener_heartbeat(self, node_id: int, expiry_ms: int, settle_ms: int) -> None:
        """This listener is up (one taken as down begins a new term, as in register_listener)."""
        self.broker._db.run(lambda tx: tx.execute("kafka_listener_heartbeat", node_id=node_id, expiry_ms=expiry_ms,
                                                  settle_ms=settle_ms))

    def live_listeners(self, max_age_ms: int) -> list[ListenerRow]:
        """The listeners that sent a heartbeat in the last ``max_age_ms``, each with the
        age of its last heartbeat and of its term in milliseconds."""
        rows = self.broker._db.run(lambda tx: tx.all("live_kafka_listeners", max_age_ms=max_age_ms), write=False)
        return [ListenerRow(Node(int(r.node_id), str(r.host), int(r.port)), int(r.age_ms), int(r.term_ms),
                            int(r.started_ms)) for r in rows]

    def unregister_listener(self, node_id: int) -> None:
        self.broker._db.run(lambda tx: tx.execute("delete_kafka_listener", node_id=node_id))

    # -- topics ----------------------------------------------------------------------------

    def topic(self, name: str) -> TopicInfo:
        meta = self.broker._topics.get(name, refresh=True)
        return TopicInfo(meta.name, meta.partition_count, kafka_topic_id(meta.topic_id, meta.created_ms))

    def list_topics(self) -> list[TopicInfo]:
        out = []
        for name in self.broker.list_topics():
            try:
                out.append(self.topic(name))
            except TxnBrokerError:  # deleted meanwhile
                continue
        return out

    def topic_config(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """A topic's config (every key the broker has, and the Kafka configs set on it that
        are accepted and ignored) and the broker's defaults."""
        meta = self.broker._topics.get(name, refresh=True)
        return dict(meta.config), defaults(self.broker.settings)

    def alter_configs(self, name: str, changes: dict[str, str | None], *, replace: bool,
                      validate_only: bool, by: str) -> None:
        """AlterConfigs (``replace``: every config not given goes back to its default) and
        IncrementalAlterConfigs (only those given; None: back to the default), through
        ``Broker.alter_topic``: checked by the topic configs' table, nothing changed on a
        refusal; recorded as made ``by`` the principal."""
        meta = self.broker._topics.get(name, refresh=True)
        defaults_now = defaults(self.broker.settings)
        reset = {k: defaults_now.get(k, KAFKA_IGNORED_CONFIGS.get(k)) for k in meta.config} if replace else {}
        wanted = {**reset, **{k: v if v is not None else defaults_now.get(k, KAFKA_IGNORED_CONFIGS.get(k))
                              for k, v in changes.items()}}
        config = check_changes(wanted)  # a name Kafka does not know: InvalidConfigError
        if not validate_only and config:
            self.broker.alter_topic(name, config=config, by=by)

    def create_partitions(self, name: str, count: int, validate_only: bool, by: str) -> None:
        """CreatePartitions: the topic grows to ``count`` partitions (InvalidPartitionsError
        to shrink or keep the count, as Kafka refuses it)."""
        meta = self.broker._topics.get(name, refresh=True)
        if count <= meta.partition_count:
            raise InvalidPartitionsError(f"topic {name!r} has {meta.partition_count} partitions; "
                                         f"it can only grow (asked {count})")
        if not validate_only:
            self.broker.alter_topic(name, partitions=count, by=by)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: the partition's log start moved up to ``offset`` (-1: the high
        watermark); its new log start (the low watermark)."""
        self._meta(topic, partition)
        return self.broker.delete_records(topic, {partition: offset})[partition]

    def create_topic(self, name: str, partitions: int, configs: dict[str, str | None],
                     validate_only: bool = False) -> TopicInfo:
        """Kafka's CreateTopics: ``configs`` are checked by the topic configs' table (a name
        Kafka does not know: INVALID_CONFIG; Kafka's configs without a meaning here are
        accepted and ignored)."""
        partitions = 1 if partitions == -1 else partitions
        config = {k: v for k, v in configs.items() if v is not None}
        if validate_only:
            from ..names import validate_topic_name

            validate_topic_name(name)
            validate_config(config, self.broker.settings)
            return TopicInfo(name, partitions)
        description = self.broker.create_topic(name, partitions, None, config)
        return TopicInfo(description.name, len(description.partitions),
                         kafka_topic_id(description.topic_id, description.created_ms))

    def delete_topic(self, name: str) -> None:
        self.broker.delete_topic(name)

    def _meta(self, topic: str, partition: int) -> TopicMeta:
        meta = self.broker._topics.get(topic)
        if not isinstance(partition, bool) and isinstance(partition, int) and partition >= meta.partition_count:
            meta = self.broker._topics.get(topic, refresh=True)  # partitions added since it was looked up
        validate_partition(partition, meta.partition_count, topic)
        return meta

    def _in_latest(self, meta: TopicMeta, seg: PlannedSegment, rows: pa.Table) -> tuple[TopicMeta, pa.Table]:
        """A segment's rows under the latest schema version known (by field id), without
        field ids: what the JSON mapping turns into record values."""
        if seg.schema_version > meta.schema_version:  # written in a version made since
            meta = self.broker._topics.get(meta.name, refresh=True)
        return meta, meta.projection_from(seg.schema_version).apply(rows)

    # -- produce ---------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, batch: Batch, transactional_id: str | None) -> ProduceResult:
        """Store one record batch as one segment. Raises the broker's errors (fenced,
        sequence, schema: nothing written)."""
        return self.commit_produce(self.prepare_produce(topic, partition, batch), transactional_id)

    def prepare_produce(self, topic: str, partition: int, batch: Batch) -> PreparedProduce:
        """The part of a produce that nothing else sees: the batch checked against the
        topic and its segment object uploaded (not yet registered: :meth:`commit_produce`
        registers it, :meth:`discard` deletes it). The listener prepares the next Produce
        request of a connection while the previous one commits."""
        meta = self._meta(topic, partition)
        if not batch.record_count:
            raise SchemaMismatchError("a record batch without records")
        try:
            table = self._to_table(meta, batch)
        except SchemaMismatchError:
            fresh = self.broker._topics.get(topic, refresh=True)  # a schema version made since?
            if (fresh.schema_version, fresh.compatibility) == (meta.schema_version, meta.compatibility):
                raise
            meta, table = fresh, self._to_table(fresh, batch)
        check_record_sizes(table.drop_columns(["_timestamp"]), meta.max_message_bytes, topic)
        idempotent = batch.producer_id >= 0 and batch.base_sequence >= 0
        if batch.transactional:
            pid, epoch = batch.producer_id, batch.producer_epoch
        else:
            pid = batch.producer_id if idempotent else self._anonymous()
            epoch = max(batch.producer_epoch, 0) if idempotent else 0
        n = batch.record_count
        write = write_segment(self.broker._store, stage_segment(
            table, topic_id=meta.topic_id, topic=meta.name, partition=partition, compression=meta.compression,
            name=f"{pid}-{epoch}-k{batch.base_sequence}-{uuid.uuid4().hex[:12]}",
            base_sequence=batch.base_sequence if idempotent else -1,
            last_sequence=batch.base_sequence + n - 1 if idempotent else None, schema_version=meta.schema_version),
            self.broker.settings.retry_budget_ms)
        return PreparedProduce(topic, partition, batch.transactional, idempotent, pid, epoch, write)

    def commit_produce(self, prepared: PreparedProduce, transactional_id: str | None) -> ProduceResult:
        """Register a prepared batch with the coordinator's fencing and sequence checks
        (any error: its object deleted, nothing written)."""
        write = prepared.write
        try:
            coordinator, budget = self.broker._coordinator, self.broker.settings.retry_budget_ms
            if prepared.transactional:
                if not transactional_id:
                    raise InvalidTxnStateError("a transactional batch needs the request's transactional id")
                # fenced, sequence-checked and joined to the open transaction in one database
                # transaction, which never starts one (KIP-890: AddPartitionsToTxn comes first)
                ident = ProducerIdentity(transactional_id, prepared.producer_id, prepared.epoch)
                results = retrying(lambda: coordinator.append(ident, None, [write], begin=False), budget)
            elif prepared.idempotent:
                ident = ProducerIdentity(None, prepared.producer_id, prepared.epoch)
                results = retrying(lambda: coordinator.append(ident, None, [write]), budget)
            else:
                handle = TransactionHandle(None, prepared.producer_id, prepared.epoch, None)
                results = retrying(lambda: coordinator.register_uploaded(handle, [write]), budget)
        except TxnBrokerError:
            self._forget(write.object_key)
            raise
        result = results[0]
        if result.duplicate:
            self._forget(write.object_key)  # the batch was stored by an earlier attempt
        log_start = result.log_start_offset
        if log_start < 0:  # not read with the append (a duplicate)
            tp = TopicPartition(prepared.topic, prepared.partition)
            log_start = self.broker.beginning_offsets([tp])[tp]
        return ProduceResult(result.base_offset, log_start, result.duplicate)

    def discard(self, prepared: PreparedProduce) -> None:
        """A prepared batch that will not be committed: its object deleted."""
        self._forget(prepared.write.object_key)

    def _forget(self, key: str) -> None:
        try:
            self.broker._store.delete([key])
        except StorageUnavailableError as error:  # an orphan: gc removes it
            log.warning("could not delete unregistered object %s: %s", key, error)

    def _anonymous(self) -> int:
        if self._anonymous_pid is None:
            self._anonymous_pid = self.broker._coordinator.allocate_producer_id()
        return self._anonymous_pid

    def _to_table(self, meta: TopicMeta, batch: Batch) -> pa.Table:
        columns = batch.columns
        n = len(columns)
        stamps = np.where(columns.timestamps >= 0, columns.timestamps, int(time.time() * 1000))
        if meta.schema.equals(DEFAULT_SCHEMA):
            headers_type = DEFAULT_SCHEMA.field("headers").type
            if columns.headers is None:  # an empty map each, built from its buffers
                headers = pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                                  pa.array([], pa.string()), pa.array([], pa.binary()),
                                                  type=headers_type)
            else:
                headers = pa.array([list(h) for h in columns.headers], headers_type)
            table = pa.Table.from_arrays([columns.keys, columns.values, headers], schema=meta.schema)
        else:
            rows = []
            for i, value in enumerate(columns.values.to_pylist()):
                try:
                    row = json.loads(value) if value is not None else None
                except (ValueError, UnicodeDecodeError) as error:
                    raise SchemaMismatchError(f"record {i}: the value is not JSON ({error})") from None
                if not isinstance(row, dict):
                    raise SchemaMismatchError(
                        f"record {i}: topic {meta.name!r} has a schema; a record's value must be a JSON object "
                        f"with its columns {meta.schema.names}")
                rows.append(row)
            # the latest schema version, or an older one the topic's compatibility lets
            # writers send in (converted); missing nullable columns are null
            table = conform_send(rows, meta.versions, meta.schema_version, meta.compatibility, meta.name)
        ts = pa.array(stamps, pa.int64()).cast(pa.timestamp("ms")).cast(TIMESTAMP_TYPE)
        table = table.add_column(0, pa.field("_timestamp", TIMESTAMP_TYPE), ts)
        check_time_range(table.select(["_timestamp"]), meta.name)  # a client's CreateTime too
        return table

    # -- fetch -----------------------------------------------------------------------------

    def offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
        """(log start, high watermark, last stable offset)."""
        meta = self._meta(topic, partition)
        offsets, _ = plan_fetch(self.broker._db, meta.topic_id, partition, None, READ_COMMITTED)
        if offsets is None:
            raise OffsetOutOfRangeError(f"{topic}-{partition} no longer exists")
        return offsets.log_start_offset, offsets.high_watermark, offsets.last_stable_offset

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, isolation_level: int,
              first: bool = True) -> FetchResult:
        """Record batches from ``offset`` up to the isolation level's end (the last stable
        offset for read_committed). Offsets a read_committed reader must pass over (an
        aborted transaction's records) come as a control batch that clients skip. They keep
        to ``max_bytes``, except the first batch when ``first`` (the response holds nothing
        yet): it comes whatever its size (Kafka's KIP-74)."""
        meta = self._meta(topic, partition)
        isolation = _isolation(isolation_level)
        offsets, segments = plan_fetch(self.broker._db, meta.topic_id, partition, offset, isolation)
        if offsets is None:
            raise OffsetOutOfRangeError(f"{topic}-{partition} no longer exists")
        if not offsets.log_start_offset <= offset <= offsets.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {topic}-{partition}'s log [{offsets.log_start_offset}, "
                f"{offsets.high_watermark}]")
        end = offsets.end(isolation)
        out: list[bytes | memoryview] = []
        size = 0
        position = offset
        now = int(time.time() * 1000)
        for seg in segments:
            if position >= end or (out and size >= max_bytes):
                break
            if seg.end_offset <= position:
                continue
            position = max(position, seg.base_offset)
            stop = min(seg.end_offset, end)
            if seg.skipped_at(isolation):
                out.append(control_batch(position, stop - 1 - position, now, commit=False))
                size += len(out[-1])
                position = stop
                continue
            if size >= max_bytes // 2 and not self._loaded(seg):
                break  # half the budget is here: sent now, while that segment is read ahead
            rows = read_rows(self._segment(seg), seg, position, stop)
            # a compacted segment's rows carry their offsets (gaps: aborted records dropped);
            # a batch's records then have offset deltas with gaps, which Kafka allows, and
            # the segment's last batch spans its trailing gap (the client continues after it)
            stored = row_offsets(rows)
            if stored is not None:
                rows = rows.drop_columns([OFFSET_COLUMN])
                if not rows.num_rows:  # only gaps from here to the segment's end: passed over
                    out.append(control_batch(position, stop - 1 - position, now, commit=False))
                    size += len(out[-1])
                    position = stop
                    continue
            meta, rows = self._in_latest(meta, seg, rows)
            # a record's bytes in a batch, about: its columns and its framing (varints, attributes)
            row_bytes = max(rows.nbytes // max(rows.num_rows, 1), 1) + RECORD_FRAMING_BYTES
            start = 0
            full = False
            while start < rows.num_rows:
                # the records that fit the bytes left of the budget; the first batch of the
                # response (``first``: nothing in it yet) comes whatever its size (Kafka's
                # KIP-74), no other passes the budget
                left = max_bytes - size - BATCH_HEADER_BYTES
                if (out or not first) and left < row_bytes:
                    full = True
                    break
                count = max(min(FETCH_BATCH_BYTES, left) // row_bytes, 1)
                chunk = rows.slice(start, count)
                if stored is None:
                    deltas = np.arange(chunk.num_rows, dtype=np.int64)
                else:
                    numbers = stored[start:start + chunk.num_rows]
                    position = int(numbers[0])
                    deltas = numbers - position
                last = stop - 1 - position if stored is not None and start + chunk.num_rows == rows.num_rows else None
                head, body = encode_columns_parts(position, self._to_columns(meta, chunk, deltas),
                                                  last_offset_delta=last)
                out += [head, body]
                size += len(head) + len(body)
                position += (int(deltas[-1]) if last is None else last) + 1
                start += chunk.num_rows
            if full:
                break
            if start == rows.num_rows:
                position = stop  # past the segment's last gap too
        self._read_ahead([seg for seg in segments if seg.end_offset > position and not seg.skipped_at(isolation)])
        return FetchResult(offsets.high_watermark, offsets.last_stable_offset, offsets.log_start_offset, out)

    def _segment(self, seg: PlannedSegment) -> pa.Table:
        """A segment decoded: from the cache, read ahead, or loaded now."""
        with self._ahead_lock:
            pending = self._ahead.pop(seg.object_key, None)
        if pending is not None:
            with contextlib.suppress(TxnBrokerError):  # read ahead in vain: loaded here (and says why)
                return pending.result()
        return self._cache.get(seg)

    def _loaded(self, seg: PlannedSegment) -> bool:
        """Whether the segment is decoded (in the cache or read ahead)."""
        with self._ahead_lock:
            pending = self._ahead.get(seg.object_key)
        return self._cache.holds(seg.object_key) or (pending is not None and pending.done())

    def _read_ahead(self, upcoming: list[PlannedSegment]) -> None:
        """Load the next :data:`READ_AHEAD_SEGMENTS` of ``upcoming`` (the segments the next
        Fetches of this partition will read) that are neither in the cache nor on their
        way: their objects fetched and decoded while this response is sent and the client
        works through it. A client sends its next Fetch of a partition only when the
        previous one is answered, so the next segment's download and decoding would
        otherwise wait for it (the Python consumer fetches ahead the same way). A Fetch of
        8 MiB over segments of 8 MB needs a new segment each time, and fetching and
        decoding one from S3 takes longer than sending a response: two are read ahead."""
        for seg in upcoming[:READ_AHEAD_SEGMENTS]:
            with self._ahead_lock:
                if seg.object_key in self._ahead or self._cache.holds(seg.object_key):
                    continue
                while len(self._ahead) >= MAX_READ_AHEAD:  # clients that went away: the oldest go
                    self._ahead.popitem(last=False)[1].cancel()
                self._ahead[seg.object_key] = prefetch_pool().submit(self._cache.get, seg)

    def _to_columns(self, meta: TopicMeta, table: pa.Table, deltas: np.ndarray) -> RecordColumns:
        stamps = table.column("_timestamp").cast(pa.int64()).combine_chunks().to_numpy()
        if meta.schema.equals(DEFAULT_SCHEMA):
            headers = table.column("headers")
            listed = None
            if headers.null_count < len(headers) and any(_entries(c) for c in headers.chunks):
                listed = [tuple(h or ()) for h in headers.to_pylist()]
            return RecordColumns(deltas, stamps, _one_array(table.column("key")),
                                 _one_array(table.column("value")), listed)
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for row in table.drop_columns(["_timestamp"]).to_pylist():
            keys.append(_key_bytes(row.get("key")) if "key" in row else None)
            values.append(json.dumps(row, default=_json_default, separators=(",", ":")).encode())
        return RecordColumns(deltas, stamps, pa.array(keys, pa.binary()), pa.array(values, pa.binary()))

    def list_offset(self, topic: str, partition: int, timestamp: int, isolation_level: int) -> tuple[int, int]:
        """ListOffsets: -2 earliest, -1 latest (the last stable offset at read_committed),
        else the first offset whose timestamp is at or after ``timestamp`` (-1 and -1: none
        is)."""
        meta = self._meta(topic, partition)
        isolation = _isolation(isolation_level)
        offsets, segments = plan_fetch(self.broker._db, meta.topic_id, partition, 0, isolation, max_segments=10_000)
        if offsets is None:
            raise OffsetOutOfRangeError(f"{topic}-{partition} no longer exists")
        end = offsets.end(isolation)
        if timestamp == -2:
            return offsets.log_start_offset, -1
        if timestamp < 0:
            return end, -1
        for seg in segments:
            if seg.skipped_at(isolation) or seg.end_offset <= offsets.log_start_offset:
                continue
            rows = read_rows(self._cache.get(seg), seg, offsets.log_start_offset, end)
            numbers = row_offsets(rows)
            stamps = rows.column("_timestamp").cast(pa.int64()).to_pylist()
            for i, ts in enumerate(stamps):
                if ts >= timestamp:
                    first = max(seg.base_offset, offsets.log_start_offset)
                    return (first + i if numbers is None else int(numbers[i])), ts
        return -1, -1  # no record at or after it: Kafka answers offset -1

    # -- transactions ----------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str | None, timeout_ms: int, producer_id: int,
                         epoch: int, check: Check | None = None) -> tuple[int, int]:
        if transactional_id is None:
            if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:  # an idempotent producer's epoch bump
                return producer_id, epoch + 1
            return self.broker._coordinator.allocate_producer_id(), 0
        current = ProducerIdentity(transactional_id, producer_id, epoch) if producer_id >= 0 else None
        ident = self.broker._coordinator.init_transactions(transactional_id, timeout_ms, current=current, check=check)
        return ident.producer_id, ident.epoch

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Sequence[tuple[str, int]], check: Check | None = None) -> None:
        ids = []
        for topic, partition in partitions:
            meta = self._meta(topic, partition)
            ids.append((meta.topic_id, partition))
        ident = ProducerIdentity(transactional_id, producer_id, epoch)
        self.broker._coordinator.add_partitions(ident, ids, check=check)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                    check: Check | None = None) -> None:
        """AddOffsetsToTxn: opens the transaction; the offsets come with TxnOffsetCommit."""
        from ..names import validate_id

        validate_id("group id", group_id)
        self.broker._coordinator.add_partitions(ProducerIdentity(transactional_id, producer_id, epoch), [],
                                                check=check)

    def txn_offset_commit(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                          offsets: dict[tuple[str, int], OffsetAndMetadata],
                          term: ListenerTerm | None = None, check: Check | None = None
                          ) -> dict[tuple[str, int], TxnBrokerError]:
        """TxnOffsetCommit: stage the offsets in the transaction. Each partition is checked
        on its own (unknown, bad metadata: that partition fails, the others are staged); any
        offset >= 0 is taken, as Kafka takes it. The partitions that failed, with why.

        ``term``: the group coordinator's term in which the group member was checked; the
        offsets are staged only if it still holds (NotCoordinatorError if the listener was
        taken as down since, as when it was stopped between its check and this write)."""
        failed, rows = self._offset_rows(offsets)
        if rows:
            self.broker._coordinator.add_offsets(
                ProducerIdentity(transactional_id, producer_id, epoch), group_id,
                [(self._meta(tp.topic, tp.partition).topic_id, tp.partition, c) for tp, c in rows.items()],
                check=_checks(term, check))
        return failed

    def _offset_rows(self, offsets: dict[tuple[str, int], OffsetAndMetadata]
                     ) -> tuple[dict[tuple[str, int], TxnBrokerError], dict[TopicPartition, OffsetAndMetadata]]:
        failed: dict[tuple[str, int], TxnBrokerError] = {}
        rows: dict[TopicPartition, OffsetAndMetadata] = {}
        for (topic, partition), value in offsets.items():
            try:
                self._meta(topic, partition)
                committed = OffsetAndMetadata.checked(value)
                if committed.offset < 0:
                    raise OffsetOutOfRangeError(f"offset {committed.offset} of {topic}-{partition} is negative")
            except TxnBrokerError as error:
                failed[(topic, partition)] = error
                continue
            rows[TopicPartition(topic, partition)] = committed
        return failed, rows

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                check: Check | None = None) -> None:
        self.broker._coordinator.end_transaction(ProducerIdentity(transactional_id, producer_id, epoch),
                                                None, commit=commit, check=check)

    def list_transactions(self, states: Iterable[str]) -> list[Any]:
        wanted = list(states)
        return self.broker.list_transactions(wanted or None)

    def describe_transaction(self, transactional_id: str) -> Any:
        return self.broker.describe_transaction(transactional_id, history_limit=1)

    # -- group offsets ---------------------------------------------------------------------

    def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata],
                       term: ListenerTerm | None = None, check: Check | None = None
                       ) -> dict[tuple[str, int], TxnBrokerError]:
        """OffsetCommit: each partition checked on its own (the partitions that failed, with
        why; the others are committed); any offset >= 0 is kept, past the log end too, as
        Kafka keeps it: the consumer's auto.offset.reset decides what it reads.

        ``term``: the group coordinator's term in which the group member was checked; the
        offsets are written only if it still holds (NotCoordinatorError otherwise), as for
        TxnOffsetCommit. None: a commit from outside any group generation (a standalone
        consumer), which no coordinator checks."""
        failed, rows = self._offset_rows(offsets)
        if rows:
            commit_offsets(self.broker._db, self.broker._topics, group_id, rows, within_log=False,
                           check=_checks(term, check))
        return failed

    def committed(self, group_id: str, partitions: Sequence[tuple[str, int]]
                  ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """Committed offsets with their metadata, None where the group has none (a topic or
        partition that does not exist has none, as Kafka answers it)."""
        known = []
        for topic, partition in partitions:
            try:
                self._meta(topic, partition)
            except UnknownTopicOrPartitionError:
                continue
            known.append(TopicPartition(topic, partition))
        got = self.broker.committed_metadata(group_id, known)
        return {(t, p): got.get(TopicPartition(t, p)) for t, p in partitions}

    def group_partitions(self, group_id: str) -> list[tuple[str, int]]:
        """The partitions ``group_id`` has committed offsets for (none: an empty list)."""
        try:
            described = self.broker.describe_group(group_id)
        except UnknownGroupError:
            return []
        return [(p.topic, p.partition) for p in described.partitions]

    def delete_group(self, group_id: str) -> None:
        self.broker.delete_group(group_id)

    def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]
                       ) -> dict[tuple[str, int], TxnBrokerError]:
        """OffsetDelete: each partition on its own (the partitions that failed, with why)."""
        failed: dict[tuple[str, int], TxnBrokerError] = {}
        good = []
        for topic, partition in partitions:
            try:
                self._meta(topic, partition)
            except TxnBrokerError as error:
                failed[(topic, partition)] = error
                continue
            good.append(TopicPartition(topic, partition))
        if good:
            self.broker.delete_offsets(group_id, good)
        return failed

    def producers(self, topic: str, partition: int) -> list[ProducerInfo]:
        """DescribeProducers: the producers with sequence state on a partition."""
        meta = self._meta(topic, partition)
        rows = self.broker._db.read(lambda tx: tx.all("partition_producers", topic_id=meta.topic_id,
                                                      partition_no=partition))
        return [ProducerInfo(int(r.producer_id), int(r.producer_epoch), int(r.last_sequence), int(r.updated_ms),
                             -1 if r.txn_start_offset is None else int(r.txn_start_offset)) for r in rows]

    def groups_with_offsets(self) -> list[str]:
        return self.broker.list_groups()

    def sweep_transactions(self) -> list[tuple[str, int | None]]:
        """Abort transactions past their timeout (fencing their producers) and complete
        decided ones: (transactional id, transaction id) of each abort."""
        aborted = self.broker.abort_expired_transactions()
        self.broker.complete_prepared_transactions()
        return [(a.transactional_id, a.txn_id) for a in aborted]

    def pending_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """Partitions of ``group_id`` with offsets staged by an open transaction
        (OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        wanted = set(partitions)
        pending = set()
        for summary in self.broker.list_transactions([TxnState.ONGOING.value]):
            description = self.broker.describe_transaction(summary.transactional_id, history_limit=1)
            for o in description.pending_offsets:
                key = (o.get("topic"), o.get("partition_no"))
                if o.get("group_id") == group_id and key in wanted:
                    pending.add(key)
        return pending


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array: its only chunk as it is (a slice of the segment's own
    buffers), else its chunks combined (a copy)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _entries(chunk: pa.Array) -> int:
    """Entries of a (possibly sliced) map array's values, summed over its rows."""
    if not len(chunk):
        return 0
    offsets = chunk.offsets
    return int(offsets[len(offsets) - 1].as_py() - offsets[0].as_py())


def _key_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, default=_json_default).encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class AclStore:
    """The Kafka ACLs of a broker's metadata database (table ``kafka_acls``), shared by
    every listener of the cluster and by ``txn-broker acls``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def find(self, matching: AclFilter | None = None) -> list[AclBinding]:
        rows = self.broker._db.run(lambda tx: tx.all("kafka_acls"), write=False)
        acls = [AclBinding(ResourceType(int(r.resource_type)), str(r.resource_name), PatternType(int(r.pattern_type)),
                           str(r.principal), str(r.host), Operation(int(r.operation)), Permission(int(r.permission)))
                for r in rows]
        return [a for a in acls if matching is None or matching.matches(a)]

    def add(self, acls: Iterable[AclBinding]) -> None:
        checked = sorted(a.check() for a in acls)
        self.broker._db.run(lambda tx: [tx.execute("insert_kafka_acl", **_acl_row(a)) for a in checked])

    def remove(self, matching: AclFilter) -> list[AclBinding]:
        """Delete the ACLs ``matching`` selects; the ACLs deleted."""
        doomed = self.find(matching)
        self.broker._db.run(lambda tx: [tx.execute("delete_kafka_acl", **_acl_row(a)) for a in doomed])
        return doomed


def _acl_row(acl: AclBinding) -> dict[str, Any]:
    return {"resource_type": int(acl.resource_type), "resource_name": acl.resource_name,
            "pattern_type": int(acl.pattern_type), "principal": acl.principal, "host": acl.host,
            "operation": int(acl.operation), "permission": int(acl.permission)}

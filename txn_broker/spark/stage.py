"""``txn_stage``: one Spark stage, one transaction, exactly once.

    with txn_stage(spark, broker, transactional_id="orders.clean", group_id="clean",
                   inputs=["orders_raw"]) as stage:
        df = stage.read()
        stage.write(transform(df), topic="orders_clean", key="order_id")

On entry: ``init_transactions`` (fencing every older instance of the transactional id and
aborting what it left open), ``begin_transaction``, then the input offsets are fixed: from
the group's committed offsets (earliest where it has none) up to the atomic last stable
offset (see :mod:`txn_broker.spark.offsets`), in one database snapshot. Every ``read()``
reads exactly those ranges, however often Spark evaluates the DataFrame.

On a clean exit: the end offsets of the inputs that were read are sent to the transaction
for ``group_id``, then it commits: the outputs and the new group offsets become visible
together. On an exception (or a KeyboardInterrupt) it aborts: nothing the stage wrote is
ever visible and the group's offsets do not move, so a rerun with the same transactional id
reads the same input again. A fenced stage (a newer instance took over) does not abort: the
newer instance owns the transaction now.

``stage.summary`` (a :class:`StageSummary`) tells what happened: records in and out,
offsets, producer identity and outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidConfigError, ProducerFencedError, TxnBrokerError
from ..faults import fault_point
from ..log.partition import READ_COMMITTED
from ..producer import ProducerState
from . import options as opts
from .failures import broker_error
from .native_read import NATIVE_SCAN_OPTION, read_ranges
from .offsets import OffsetRanges, resolve_offsets
from .planning import count_visible
from .schemas import check_write

if TYPE_CHECKING:
    from ..broker import Broker
    from ..producer import Producer

log = logging.getLogger(__name__)


@dataclass
class StageSummary:
    """What a stage did. ``input_offsets`` maps ``"topic-partition"`` to the ``start`` and
    ``end`` it read (``end`` is what the group commits); ``outcome`` is ``"committed"``,
    ``"aborted"`` or ``"fenced"`` (a newer instance took over; this one did nothing more)."""

    transactional_id: str
    group_id: str
    producer_id: int | None = None
    producer_epoch: int | None = None
    txn_id: int | None = None
    outcome: str = "running"
    error: str | None = None
    inputs_read: list[str] = field(default_factory=list)
    input_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    records_in: int = 0
    records_in_by_topic: dict[str, int] = field(default_factory=dict)
    records_out: int = 0
    records_out_by_topic: dict[str, int] = field(default_factory=dict)
    #: bytes of the segments written per output topic
    bytes_out_by_topic: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0

    def log_line(self) -> str:
        """One line for the log: the outcome, records in and out, and per output topic what
        this attempt wrote (records, bytes) and whether that became visible."""
        line = f"{self.outcome}, {self.records_in} record(s) in, {self.records_out} out"
        if self.records_out_by_topic:
            written = "; ".join(f"{topic}: {n:,} record(s), {self.bytes_out_by_topic.get(topic, 0):,} bytes"
                                for topic, n in sorted(self.records_out_by_topic.items()))
            fate = {"committed": "committed", "aborted": "aborted: none of it is visible",
                    "fenced": "left to the newer instance that fenced this one",
                    "unknown": "commit outcome unknown: settled by close() or the next attempt"}
            line += f" (written: {written}; {fate.get(self.outcome, self.outcome)})"
        return line


class Stage:
    """The handle a stage function gets from :func:`txn_stage`."""

    def __init__(self, spark: Any, broker: Broker, producer: Producer, group_id: str, inputs: Sequence[str],
                 ranges: OffsetRanges, read_options: dict[str, str]) -> None:
        self.spark = spark
        self.broker = broker
        self.producer = producer
        self.group_id = group_id
        self.inputs = list(inputs)
        #: the fixed ``[start, end)`` of every input partition
        self.offsets = ranges
        self._read_options = read_options
        self._read: list[str] = []
        assert producer.transactional_id is not None
        self.summary = StageSummary(producer.transactional_id, group_id)

    def read(self, topic: str | None = None) -> Any:
        """A DataFrame of the inputs' records in the stage's fixed ranges, read_committed:
        ``_topic``, ``_partition``, ``_offset``, ``_timestamp``, then the topics' columns
        (several inputs: the union of their columns by name, ``_topic`` tells them apart).
        ``topic``: only that input. Only inputs read here have their offsets committed.
        What a topic's Iceberg table already holds is scanned from its Parquet files
        (:mod:`.native_read`; ``read_options={"iceberg.native_scan": "false"}`` turns it off)."""
        topics = self.inputs if topic is None else [topic]
        unknown = [t for t in topics if t not in self.inputs]
        if unknown:
            raise InvalidConfigError(f"stage.read({topic!r}): not one of the stage's inputs {self.inputs}")
        ranges = self.offsets.only(topics)
        source_options = {k: v for k, v in self._read_options.items() if k.lower() != NATIVE_SCAN_OPTION}
        native = opts._bool({k.lower(): v for k, v in self._read_options.items()}, NATIVE_SCAN_OPTION, True)
        df = read_ranges(self.spark, self.broker, ranges, source_options, native_scan=native)
        for t in topics:
            if t not in self._read:
                self._read.append(t)
        return df

    def write(self, df: Any, topic: str, *, key: str | None = None, segment_bytes: int | None = None) -> None:
        """Write ``df`` to ``topic`` inside the stage's transaction (``key``: the column
        whose hash picks the partition, as ``producer.send(key=...)``). The records stay
        invisible to read_committed readers until the stage commits.

        Raises SchemaMismatchError (before any task runs), ProducerFencedError, or the
        broker error that failed the Spark job."""
        meta = self.broker._topics.get(topic, refresh=True)
        check_write(df.schema, meta.versions, meta.schema_version, meta.compatibility, topic)
        handle = self.producer.transaction_handle()
        writer = df.write.format("txn_topic").mode("append").option("topic", topic)
        writer = writer.options(**opts.connection_options(self.broker), **opts.transaction_options(handle))
        writer = writer.option("segment.bytes", str(segment_bytes or self.broker.settings.segment_bytes))
        if key is not None:
            writer = writer.option("key.column", key)
        try:
            writer.save()
        except Exception as error:
            raise (broker_error(error) or error) from error

    def _finish_summary(self) -> None:
        s = self.summary
        s.inputs_read = list(self._read)
        read = self.offsets.only(self._read)
        s.input_offsets = {f"{r.topic}-{r.partition}": {"start": r.start, "end": r.end} for r in read}
        s.records_in_by_topic = count_visible(self.broker, read) if len(read) else {}
        s.records_in = sum(s.records_in_by_topic.values())
        if s.txn_id is not None:
            self._count_written(s.txn_id)

    def _count_written(self, txn_id: int | None) -> None:
        """Records and bytes per topic of this attempt's transaction (``txn_id``; None: the
        transactional id's current one, if it is still this producer's epoch)."""
        s = self.summary
        txn = self.broker.describe_transaction(s.transactional_id)
        mine = txn.txn_id == txn_id if txn_id is not None else txn.producer_epoch == s.producer_epoch
        if not mine or txn.txn_id is None:
            return
        records: dict[str, int] = {}
        size: dict[str, int] = {}
        for p in txn.partitions:
            records[p.topic] = records.get(p.topic, 0) + p.record_count
            size[p.topic] = size.get(p.topic, 0) + p.size_bytes
        s.records_out_by_topic, s.bytes_out_by_topic = records, size
        s.records_out = sum(records.values())

    def _count_failed_attempt(self) -> None:
        """Before an abort: what the attempt read and wrote, for its log line. Best effort
        (the database may be why it failed)."""
        s = self.summary
        try:
            s.inputs_read = list(self._read)
            read = self.offsets.only(self._read)
            s.records_in_by_topic = count_visible(self.broker, read) if len(read) else {}
            s.records_in = sum(s.records_in_by_topic.values())
            self._count_written(None)
        except TxnBrokerError as error:
            log.debug("stage %s: could not count what the failed attempt wrote: %s", s.transactional_id, error)


@contextmanager
def txn_stage(spark: Any, broker: Broker, *, transactional_id: str, group_id: str, inputs: Sequence[str],
              transaction_timeout_ms: int | None = None, isolation_level: str = READ_COMMITTED,
              read_options: dict[str, str] | None = None) -> Iterator[Stage]:
    """Run a stage in one transaction (see the module docstring). ``read_options``: extra
    ``txn_topic`` read options (``minPartitions``, ``maxRecordsPerPartition``, ...).
    ``transaction_timeout_ms``: None means the broker's ``stage_transaction_timeout_ms``.

    Raises what the stage raised (after aborting), ProducerFencedError (fatal: a newer
    instance exists), InvalidTransactionTimeoutError, or a broker error of the commit."""
    from .registry import register

    if isinstance(inputs, str):
        inputs = [inputs]
    register(spark)
    started = time.monotonic()
    if transaction_timeout_ms is None:
        transaction_timeout_ms = broker.settings.stage_transaction_timeout_ms
    producer: Producer = broker.producer(transactional_id=transactional_id,
                                         transaction_timeout_ms=transaction_timeout_ms)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        ranges = resolve_offsets(broker, list(inputs), "earliest", "latest", isolation_level=isolation_level,
                                 group_id=group_id)
        stage = Stage(spark, broker, producer, group_id, inputs, ranges, dict(read_options or {}))
        ident = producer.identity
        assert ident is not None
        stage.summary.producer_id, stage.summary.producer_epoch = ident.producer_id, ident.epoch
        log.info("stage %s: producer id %d epoch %d, reading %s", transactional_id, ident.producer_id,
                 ident.epoch, ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in ranges))
        try:
            yield stage
            fault_point("spark.before_commit")
            ending = stage.offsets.only(stage._read).ending()
            if ending:
                producer.send_offsets_to_transaction(ending, group_id)
            stage.summary.txn_id = producer.transaction_handle().txn_id
            stage._finish_summary()
            producer.commit_transaction()
            stage.summary.outcome = "committed"
        except BaseException as error:
            stage.summary.error = f"{type(error).__name__}: {error}"
            if isinstance(error, ProducerFencedError) or producer.state in (ProducerState.FATAL_ERROR,
                                                                             ProducerState.CLOSED):
                stage.summary.outcome = "fenced"
            elif not producer.can_abort:
                # the commit failed with an unknown outcome: it may have committed, so it is
                # not aborted here; close() settles it, or the next attempt's init does
                stage.summary.outcome = "unknown"
            else:
                stage._count_failed_attempt()
                stage.summary.outcome = "aborted"
                try:
                    producer.abort_transaction()
                except TxnBrokerError as abort_error:
                    log.warning("stage %s: the abort after a failure also failed: %s", transactional_id, abort_error)
            raise
        finally:
            stage.summary.duration_s = round(time.monotonic() - started, 3)
            log.info("stage %s: %s", transactional_id, stage.summary.log_line())
    finally:
        producer.close()

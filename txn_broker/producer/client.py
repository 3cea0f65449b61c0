"""The producer client: validated, buffered sends; idempotent appends; transactions.

A send is validated at once (topic, schema, partition, record sizes) and buffered per
partition by the :mod:`accumulator <txn_broker.producer.accumulator>`. The
:mod:`sender <txn_broker.producer.sender>` turns buffers into numbered segments, uploads
and registers them; the :mod:`state <txn_broker.producer.state>` table says which call is
legal when.

In a transaction, the first send to a partition adds it to the transaction
(AddPartitionsToTxn); the first one starts the transaction and its timeout clock, so a
producer that hangs with buffered records is aborted by the timeout sweep as in Kafka. As
in Kafka's producer, the add is sent in the background (:mod:`partition_adder
<txn_broker.producer.partition_adder>`) and a send is otherwise local: what the
coordinator answers (a fenced zombie, an expired id) is raised by the next call. The
registration adds its partitions too (idempotent; it is what opens the transaction after
a lost reply), under the transactional id's lock, and checks the epoch again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from ..config import Settings
from ..coordinator import Coordinator
from ..database import Database
from ..errors import (
    IllegalStateError,
    InvalidInputError,
    InvalidPidMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    SchemaMismatchError,
    TxnBrokerError,
)
from ..faults import fault_point
from ..log.appends import segment_registered
from ..log.batches import check_record_sizes
from ..log.partition import check_offset
from ..log.segment_format import with_timestamp
from ..log.types import AppendResult, ProducerIdentity, TransactionHandle
from ..models import OffsetAndMetadata, TopicPartition
from ..names import validate_id, validate_partition
from ..retry import retrying
from ..storage import ObjectStore
from ..topic_schemas import conform_send
from ..topics import TopicMeta, Topics
from .accumulator import RecordAccumulator
from .partition_adder import PartitionAdder
from .sender import SegmentSender
from .state import P, ProducerState, move, require

if TYPE_CHECKING:
    from ..metrics.client import ClientMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")


class Producer:
    """Create with ``broker.producer()`` (idempotent) or
    ``broker.producer(transactional_id=..., transaction_timeout_ms=...)``. Writes through
    the transaction ``coordinator``, the topic lookup ``topics``, the metadata database
    ``db`` (offset checks) and the object ``store``."""

    def __init__(self, coordinator: Coordinator, topics: Topics, db: Database, store: ObjectStore,
                 settings: Settings, transactional_id: str | None = None,
                 transaction_timeout_ms: int | None = None, metrics: ClientMetrics | None = None) -> None:
        #: where the producer reports its latencies and counts (txn_broker.metrics.client); None: nowhere
        self._metrics = metrics
        if transaction_timeout_ms is None:  # the one default: Settings.transaction_timeout_ms
            transaction_timeout_ms = settings.transaction_timeout_ms
        self._coordinator = coordinator
        self._topics = topics
        self._db = db
        self.transactional_id = (
            None if transactional_id is None else validate_id("transactional id", transactional_id)
        )
        if not isinstance(transaction_timeout_ms, int) or isinstance(transaction_timeout_ms, bool):
            raise InvalidTransactionTimeoutError(
                f"transaction_timeout_ms must be an int, got {transaction_timeout_ms!r}"
            )
        self.transaction_timeout_ms = transaction_timeout_ms
        self._state = P.UNINITIALIZED if self.transactional_id else P.READY
        self._ident: ProducerIdentity | None = None
        self._lock = threading.RLock()
        self._retry_budget_ms = settings.retry_budget_ms
        self._accumulator = RecordAccumulator(settings.segment_bytes)
        self._sender = SegmentSender(store, settings.upload_threads, settings.retry_budget_ms)
        self._txn_id: int | None = None
        # a coordinator call of this transaction was made: a transaction may be open even
        # while _txn_id is None (the call's reply was lost), so commit and abort must ask
        self._txn_requested = False
        self._txn_partitions: set[tuple[int, int]] = set()  # added by send() in this transaction
        #: AddPartitionsToTxn requests sent in the background, not yet collected
        self._adder = PartitionAdder()
        #: send_offsets_to_transaction() asked the coordinator (the reply may have been lost):
        #: only then may the commit have group offsets to apply
        self._txn_offsets_requested = False
        self._txn_appends: list[AppendResult] = []
        #: InvalidPidMappingError was seen (KIP-360): the abort re-initialises
        self._pid_mapping_lost = False
        #: a sequence error doomed the transaction: its abort gets a new epoch (KIP-360)
        self._epoch_bump_required = False
        self._abortable_cause = ""

    # -- state ---------------------------------------------------------------------------

    @property
    def state(self) -> ProducerState:
        return self._state

    @property
    def identity(self) -> ProducerIdentity | None:
        """(transactional id, producer id, epoch) once initialised."""
        return self._ident

    @property
    def producer_id(self) -> int | None:
        return self._ident.producer_id if self._ident else None

    @property
    def epoch(self) -> int | None:
        return self._ident.epoch if self._ident else None

    def _to(self, target: ProducerState) -> None:
        self._state = move(self._state, target, self.transactional_id or self.producer_id)

    def _require(self, *states: ProducerState, action: str) -> None:
        require(self._state, states, action=action, transactional_id=self.transactional_id,
                abortable_cause=self._abortable_cause)

    @property
    def can_abort(self) -> bool:
        """Whether ``abort_transaction()`` is legal now: a transaction is open, failed, or
        being aborted. False after a commit whose outcome is unknown (retry the commit), and
        for a fenced or closed producer (the newer instance owns the transaction)."""
        return self._state in (P.IN_TRANSACTION, P.ABORTABLE_ERROR, P.ABORTING)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Apply what a coordinator or storage error means for this producer's state: a fatal
        one (fenced, a sequence gap) finishes the producer; one that dooms the open
        transaction (abortable, or bad input such as a topic deleted meanwhile) leaves
        ``abort_transaction()`` as the only way on. Anything else (retriable, or unknown: a
        timeout, a lost reply) leaves the state as it is, so the same call can be retried."""
        try:
            yield
        except TxnBrokerError as error:
            if self._metrics is not None:
                self._metrics.failed(error)
            if isinstance(error, InvalidPidMappingError):
                self._pid_mapping_lost = True
            if isinstance(error, OutOfOrderSequenceError) and self.transactional_id is not None and \
                    self._state in (P.IN_TRANSACTION, P.COMMITTING):
                # Kafka's transactional producer (KIP-360): a refused sequence dooms the
                # transaction, not the producer; the abort then bumps the epoch, which starts
                # every partition's sequences again (TransactionManager's epochBumpRequired)
                error.fatal, error.abortable = False, True
                self._epoch_bump_required = True
            if error.fatal:
                self._state = P.FATAL_ERROR
                self._discard_buffers()
            elif (error.abortable or isinstance(error, InvalidInputError)) and \
                    self._state in (P.IN_TRANSACTION, P.COMMITTING):
                self._abortable_cause = f"{type(error).__name__}: {error}"
                self._to(P.ABORTABLE_ERROR)
            raise

    def _retry(self, call: Callable[[], T]) -> T:
        """``call`` under the broker's one retry policy (txn_broker.retry, retry_budget_ms)."""
        metrics = self._metrics
        if metrics is None:
            return retrying(call, self._retry_budget_ms)
        attempts = 0

        def counted() -> T:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                metrics.retried()
            return call()

        return retrying(counted, self._retry_budget_ms)

    def _identity(self) -> ProducerIdentity:
        if self._ident is None:  # an idempotent producer gets its id on first use
            pid = self._coordinator.allocate_producer_id()
            self._ident = ProducerIdentity(None, pid, 0)
        return self._ident

    # -- transactions --------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Register the transactional id, fencing every older instance and finishing what
        it left. Once per producer: a second call raises IllegalStateError (create a new
        producer for a new instance). Raises InvalidTransactionTimeoutError,
        ProducerFencedError (a newer instance init'ed concurrently),
        DatabaseUnavailableError (retry)."""
        with self._lock:
            if self.transactional_id is None:
                raise InvalidTxnStateError("init_transactions() needs a transactional_id")
            if self._state not in (P.UNINITIALIZED, P.FATAL_ERROR, P.CLOSED):
                raise IllegalStateError(
                    f"producer {self.transactional_id!r} is already initialised (producer id "
                    f"{self.producer_id}, epoch {self.epoch}); a second init_transactions() would "
                    "fence only this producer itself. Create a new producer for a new instance."
                )
            self._require(P.UNINITIALIZED, action="init_transactions")
            with self._guard():
                self._ident = self._retry(lambda: self._coordinator.init_transactions(
                    self.transactional_id or "", self.transaction_timeout_ms))
            self._sender.reset_sequences()
            self._to(P.READY)

    def begin_transaction(self) -> None:
        """Local only: the coordinator sees the transaction when its first segment is
        registered (or its first offsets are sent)."""
        with self._lock:
            self._require(P.READY, action="begin_transaction")
            if self.transactional_id is None:
                raise InvalidTxnStateError("begin_transaction() needs a transactional producer")
            self._txn_id = None
            self._txn_requested = False
            self._txn_partitions = set()
            self._txn_offsets_requested = False
            self._txn_appends = []
            self._to(P.IN_TRANSACTION)

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
                                    group_id: str) -> None:
        """Commit ``group_id``'s next offsets to read atomically with this transaction
        (ints, or OffsetAndMetadata values to keep a metadata string and leader epoch)."""
        with self._lock:
            self._require(P.IN_TRANSACTION, action="send_offsets_to_transaction")
            validate_id("group id", group_id)
            if not isinstance(offsets, Mapping):
                raise InvalidInputError("offsets must be a dict of TopicPartition -> int")
            rows: list[tuple[int, int, int | OffsetAndMetadata]] = []
            for tp, value in offsets.items():
                topic, partition = tp
                meta = self._topics.get(topic)
                validate_partition(partition, meta.partition_count, topic)
                committed = OffsetAndMetadata.checked(value)
                check_offset(self._db, meta.topic_id, meta.name, partition, committed.offset)
                rows.append((meta.topic_id, partition, committed))
            if not rows:
                return
            ident = self._identity()
            with self._guard():
                self._collect_adds(wait=True)
                self._txn_requested = True
                self._txn_offsets_requested = True
                self._txn_id = self._retry(
                    lambda: self._coordinator.add_offsets(ident, group_id, rows))
            fault_point("offsets.after_send")

    def transaction_handle(self) -> TransactionHandle:
        """Start the transaction at the coordinator if needed and return the handle an
        external writer (the Spark data source) uses to register segments into it. For an
        idempotent producer: its identity, with no transaction."""
        with self._lock:
            ident = self._identity()
            if self.transactional_id is None:
                self._require(P.READY, action="transaction_handle")
                return TransactionHandle(None, ident.producer_id, ident.epoch, None)
            self._require(P.IN_TRANSACTION, action="transaction_handle")
            with self._guard():
                self._collect_adds(wait=True)
            if self._txn_id is None:
                with self._guard():
                    self._txn_requested = True
                    self._txn_id = self._retry(lambda: self._coordinator.add_partitions(ident, []))
            return TransactionHandle(self.transactional_id, ident.producer_id, ident.epoch, self._txn_id)

    def commit_transaction(self) -> list[AppendResult]:
        """Flush, then commit: every record of the transaction, in every partition, and its
        group offsets become visible together, and visible to every reader that starts
        after this returns.

        Raises ProducerFencedError (fatal); an abortable error (the transaction did not
        commit: call ``abort_transaction()``); or a retriable or unknown error (a timeout, a
        lost reply, the database or storage down): the transaction may or may not have
        committed, so the only legal call then is ``commit_transaction()`` again, which
        answers success if it had committed, commits it if not, and leaves the producer
        ready for the next transaction. ``abort_transaction()`` is refused meanwhile."""
        with self._lock:
            if self._state == P.ABORTING:
                raise IllegalStateError(
                    f"producer {self.transactional_id!r}: abort_transaction() did not complete; retry "
                    "abort_transaction() (the transaction may be aborted already, so it cannot commit)"
                )
            self._require(P.IN_TRANSACTION, P.COMMITTING, action="commit_transaction")
            started = time.perf_counter()
            self._to(P.COMMITTING)
            with self._guard():
                ident = self._identity()
                self._sender.upload(ident, self._accumulator.drain(self._accumulator.keys()))
                self._collect_adds(wait=True)  # sent in the background while this uploaded
                if self._sender.pending and self._txn_id is None:
                    # the transaction's id is unknown (a lost reply): this append joins or
                    # opens the transaction and learns it
                    self._register()
                    fault_point("produce.after_register")
                txn_id, offsets = self._txn_id, self._txn_offsets_requested
                if self._sender.pending and txn_id is not None:
                    # the last segments are registered in the commit's own database
                    # transaction: one durable commit instead of two
                    fault_point("commit.before_end")
                    self._txn_appends.extend(self._sender.register(
                        partial(self._coordinator.append_and_commit, ident, txn_id, offsets=offsets)))
                elif txn_id is not None or self._txn_requested:
                    fault_point("commit.before_end")
                    # txn_id None: a request's lost reply may have opened one; commit that
                    self._retry(lambda: self._coordinator.end_transaction(
                        ident, txn_id, commit=True, offsets=offsets))
            appends, self._txn_appends = self._txn_appends, []
            self._txn_id = None
            self._txn_requested = False
            self._to(P.READY)
            if self._metrics is not None:
                self._metrics.committed(time.perf_counter() - started)
            return appends

    def abort_transaction(self) -> None:
        """Abort: the transaction's records stay in the log marked aborted and are never
        returned to read_committed readers; its group offsets are discarded.

        Refused (IllegalStateError) after a commit whose outcome is unknown: retry the
        commit instead. After InvalidPidMappingError (the transactional id expired while
        the producer idled, KIP-360), the abort also gives this producer a new epoch, or a
        new producer id, and the next transaction proceeds; ProducerFencedError if a newer
        instance took the id meanwhile. A retriable or unknown error: retry the abort."""
        with self._lock:
            if self._state == P.COMMITTING:
                raise IllegalStateError(
                    f"producer {self.transactional_id!r}: commit_transaction() did not complete and "
                    "its outcome is unknown (the transaction may have committed), so it cannot be "
                    "aborted; retry commit_transaction(), which reports the real outcome"
                )
            self._require(P.IN_TRANSACTION, P.ABORTABLE_ERROR, P.ABORTING, action="abort_transaction")
            started = time.perf_counter()
            self._to(P.ABORTING)
            with self._guard():
                self._abort()
            self._to(P.READY)
            if self._metrics is not None:
                self._metrics.aborted(time.perf_counter() - started)

    def _abort(self) -> None:
        self._accumulator.clear()
        self._settle_adds_before_abort()
        if self._pid_mapping_lost:
            # KIP-360: the coordinator forgot this transactional id, so nothing of it is open
            # there and nothing unacknowledged was registered. InitProducerId with the current
            # identity gives a new epoch (a new producer id if the id expired), unless a newer
            # instance took the id meanwhile (ProducerFencedError).
            self._sender.discard()
            current = self._identity()
            self._ident = self._retry(lambda: self._coordinator.init_transactions(
                self.transactional_id or "", self.transaction_timeout_ms, current=current))
            self._sender.reset_sequences()
            self._pid_mapping_lost = False
        else:
            self._sender.resolve(partial(segment_registered, self._db))
            if self._txn_id is not None or self._txn_requested:
                # txn_id None: abort whatever a request whose reply was lost opened
                ident, txn_id = self._identity(), self._txn_id
                self._retry(lambda: self._coordinator.end_transaction(ident, txn_id, commit=False))
            if self._epoch_bump_required:
                # the sequences the broker and this producer hold disagree: InitProducerId with
                # the current identity gives a new epoch, and every partition starts at 0
                current = self._identity()
                self._ident = self._retry(lambda: self._coordinator.init_transactions(
                    self.transactional_id or "", self.transaction_timeout_ms, current=current))
                self._sender.reset_sequences()
                self._epoch_bump_required = False
        self._txn_id = None
        self._txn_requested = False
        self._txn_appends = []

    def _collect_adds(self, *, wait: bool) -> None:
        """Learn what the AddPartitionsToTxn requests sent in the background came to
        (``wait``: all of them) and raise the first failure, for ``_guard`` to classify.
        The partitions of a failed add are sent again by the next send to them."""
        if not self._adder.busy:
            return
        outcome = self._adder.collect(wait=wait)
        if outcome.txn_id is not None:
            self._txn_id = outcome.txn_id
        self._txn_partitions.difference_update(outcome.failed)
        if outcome.error is not None:
            raise outcome.error

    def _settle_adds_before_abort(self) -> None:
        """An abort waits for the adds in flight. A fencing error among them is raised (a
        zombie must not abort); an expired id makes this abort the KIP-360 recovery; any
        other failure is moot, since the abort ends whatever the add may have opened."""
        try:
            self._collect_adds(wait=True)
        except InvalidPidMappingError:
            self._pid_mapping_lost = True
        except TxnBrokerError as error:
            if error.fatal:
                raise
            log.debug("AddPartitionsToTxn failed before an abort: %s", error)

    @contextmanager
    def transaction(self) -> Iterator[Producer]:
        """``with producer.transaction():`` begins, commits on success, aborts on an
        exception (but not when this producer was fenced: a zombie must not abort)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            if self.can_abort:
                try:
                    self.abort_transaction()
                except TxnBrokerError as error:
                    log.warning("abort after a failed transaction also failed: %s", error)
            raise
        self.commit_transaction()

    # -- sending -------------------------------------------------------------------------

    def send(self, topic: str, data: Any, *, key: str | None = None, partition: int | None = None) -> None:
        """Validate and buffer records. ``data``: a pyarrow Table or RecordBatch, or a list
        of dicts, matching the topic's schema. Partition: ``partition`` if given; else by a
        stable hash of the ``key`` column (equal keys, same partition); else spread.

        Raises UnknownTopicOrPartitionError, SchemaMismatchError, RecordTooLargeError
        (nothing buffered), InvalidTxnStateError. In a transaction, a first send to a
        partition sends AddPartitionsToTxn in the background: what the coordinator answers
        (ProducerFencedError, InvalidPidMappingError, ...) is raised by the next call (a
        later send once the answer has arrived, or flush/commit, which wait for it)."""
        with self._lock:
            if self.transactional_id is not None:
                self._require(P.IN_TRANSACTION, action="send")
                with self._guard():  # what an earlier send's AddPartitionsToTxn came to
                    self._collect_adds(wait=False)
            else:
                self._require(P.READY, action="send")
            meta, table = self._conform(topic, data)
            if table.num_rows == 0:
                return
            check_record_sizes(table, meta.max_message_bytes, topic)
            parts = self._accumulator.partition(meta, table, key, partition)
            given_rows, given_bytes = table.num_rows, table.nbytes
            table = with_timestamp(table, int(time.time() * 1000))
            split = self._accumulator.split(table, parts)
            ident = self._identity()
            if self.transactional_id is not None:
                # AddPartitionsToTxn before the first write to a partition (docs/semantics.md):
                # the first one starts the transaction and its timeout clock now, not at the
                # flush. Sent in the background; its errors are raised by the next call. The
                # registration of the data checks the epoch and the open transaction again,
                # under the lock.
                new = sorted((meta.topic_id, p) for p in split if (meta.topic_id, p) not in self._txn_partitions)
                if new:
                    self._txn_requested = True
                    self._adder.submit(partial(self._retry, partial(self._coordinator.add_partitions, ident, new)),
                                       new)
                    self._txn_partitions.update(new)
            if self._metrics is not None:  # accepted: counted as given (Arrow bytes)
                self._metrics.sent(topic, given_rows, given_bytes)
            full = self._accumulator.append(meta, split)
            if full:
                with self._guard():
                    self._flush(full)

    def _conform(self, topic: str, data: Any) -> tuple[TopicMeta, pa.Table]:
        """The send as a table of the topic's latest schema version (an older version the
        topic's schema.compatibility allows is converted); a send matching none is looked
        at again with the topic's metadata read afresh, once (it may be in a version made
        since this producer looked), then refused with SchemaMismatchError."""
        meta = self._topics.get(topic)
        try:
            return meta, conform_send(data, meta.versions, meta.schema_version, meta.compatibility, topic)
        except SchemaMismatchError:
            fresh = self._topics.get(topic, refresh=True)
            if (fresh.schema_version, fresh.compatibility) == (meta.schema_version, meta.compatibility):
                raise
            return fresh, conform_send(data, fresh.versions, fresh.schema_version, fresh.compatibility, topic)

    # -- flushing ------------------------------------------------------------------------

    def flush(self) -> list[AppendResult]:
        """Upload and register everything buffered. Returns what was appended."""
        with self._lock:
            self._require(P.READY, P.IN_TRANSACTION, P.COMMITTING, action="flush")
            with self._guard():
                return self._flush_all()

    def _flush_all(self) -> list[AppendResult]:
        return self._flush(self._accumulator.keys())

    def _flush(self, keys: list[tuple[int, int]]) -> list[AppendResult]:
        self._sender.upload(self._identity(), self._accumulator.drain(keys))
        self._collect_adds(wait=True)  # sent in the background while this uploaded
        if not self._sender.pending:
            return []
        results = self._register()
        fault_point("produce.after_register")
        return results

    def _register(self) -> list[AppendResult]:
        ident = self._identity()
        if self.transactional_id is not None:
            self._txn_requested = True  # the append starts the transaction if none is open
        results = self._sender.register(lambda writes: self._coordinator.append(ident, self._txn_id, writes))
        if self.transactional_id is not None and results:
            self._txn_id = results[0].txn_id
        self._txn_appends.extend(results)
        return results

    def _discard_buffers(self) -> None:
        self._accumulator.clear()
        self._sender.discard()

    def close(self) -> None:
        """Flush an idempotent producer; abort a transaction still open. Idempotent."""
        with self._lock:
            if self._state == P.CLOSED:
                return
            try:
                if self._state == P.READY and self.transactional_id is None:
                    self._flush_all()
                elif self._state in (P.IN_TRANSACTION, P.ABORTABLE_ERROR, P.COMMITTING, P.ABORTING):
                    if self._state == P.COMMITTING:
                        # The caller never heard "committed": aborting is within what it may
                        # expect. EndTxn is atomic, so this aborts the transaction if the
                        # commit never landed and is refused (harmlessly) if it did.
                        log.warning("closing producer %r after a commit whose outcome is unknown: "
                                    "aborting its transaction unless it committed", self.transactional_id)
                    try:
                        if self._pid_mapping_lost:
                            self._discard_buffers()  # nothing of it is open at the coordinator
                        else:
                            self._abort()
                    except TxnBrokerError as error:
                        log.warning("abort on close failed: %s", error)
            finally:
                self._state = P.CLOSED
                self._adder.close()
                self._sender.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

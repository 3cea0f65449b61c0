"""The producer: validated, buffered sends; idempotent appends; transactions.

A send is validated at once (topic, schema, partition, record sizes) and buffered per
partition. A buffer becomes one segment object at ``segment_bytes``, on ``flush()`` or at
commit. Flushing uploads the objects (in parallel) and only then registers them in the
partition logs, so no reader can see a partial object. Each segment carries the next
sequence number of its (producer id, partition): a registration retried after a lost
reply is stored once, and a gap is refused (docs/semantics.md, "Idempotent appends").

In a transaction, the first send to a partition adds it to the transaction
(AddPartitionsToTxn); the first one starts the transaction and its timeout clock, so a
producer that hangs with buffered records is aborted by the timeout sweep as in Kafka.
Other sends make one cheap unlocked fencing check, so that a zombie's ``send()`` fails at
once. The registration adds its partitions too (idempotent; it is what opens the
transaction after a lost reply), under the transactional id's lock.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .coordinator import (
    AppendResult,
    ProducerIdentity,
    SegmentWrite,
    TransactionHandle,
)
from .errors import (
    IllegalStateError,
    InvalidInputError,
    InvalidPidMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    SchemaMismatchError,
    TxnBrokerError,
    UnknownProducerStateError,
)
from .faults import fault_point
from .models import TopicPartition
from .names import validate_id, validate_partition
from .records import check_record_sizes, encode_segment, key_partitions, to_table, with_timestamp
from .retry import RETRY_ATTEMPTS, retrying

if TYPE_CHECKING:
    from .broker import Broker
    from .topics import TopicMeta

log = logging.getLogger(__name__)


class ProducerState(StrEnum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"
    CLOSED = "closed"


P = ProducerState

#: The producer's states and, for each, the states it may move to, with the reason. Every
#: change goes through ``Producer._to``, which refuses any other move (as Kafka's
#: ``TransactionManager`` does). ``close()`` may follow any state but CLOSED.
#:
#: * UNINITIALIZED: a transactional producer before ``init_transactions()``, which moves it
#:   to READY (or FATAL_ERROR: a newer instance initialised concurrently). A second
#:   ``init_transactions()`` is refused (IllegalStateError): it would fence nothing but the
#:   producer itself.
#: * READY -> IN_TRANSACTION: ``begin_transaction()``. (An idempotent producer is READY
#:   from the start and stays READY.)
#: * IN_TRANSACTION -> COMMITTING / ABORTING: ``commit_transaction()`` /
#:   ``abort_transaction()``; -> ABORTABLE_ERROR: a send, flush or offsets call failed in a
#:   way that dooms the transaction (e.g. InvalidPidMappingError, KIP-360); -> FATAL_ERROR:
#:   fenced, or a fatal sequence error.
#: * COMMITTING -> READY: committed. COMMITTING -> COMMITTING: a commit that failed with a
#:   retriable or unknown error (a timeout, a lost reply, the database down) keeps the
#:   producer here, and only a retried ``commit_transaction()`` may follow: the commit may
#:   have landed, so an abort is refused locally (as in Kafka); the retry reports the real
#:   outcome. -> ABORTABLE_ERROR: the coordinator refused the commit (it did not happen);
#:   -> FATAL_ERROR: fenced.
#: * ABORTING -> READY: aborted. ABORTING -> ABORTING: the same rule for an abort whose
#:   outcome is unknown: only a retried ``abort_transaction()`` may follow.
#: * ABORTABLE_ERROR -> ABORTING: the only way on is ``abort_transaction()``.
#: * FATAL_ERROR: only ``close()``; make a new producer.
_TRANSITIONS: dict[ProducerState, frozenset[ProducerState]] = {
    P.UNINITIALIZED: frozenset({P.READY, P.FATAL_ERROR, P.CLOSED}),
    P.READY: frozenset({P.IN_TRANSACTION, P.FATAL_ERROR, P.CLOSED}),
    P.IN_TRANSACTION: frozenset({P.COMMITTING, P.ABORTING, P.ABORTABLE_ERROR, P.FATAL_ERROR, P.CLOSED}),
    P.COMMITTING: frozenset({P.READY, P.COMMITTING, P.ABORTABLE_ERROR, P.FATAL_ERROR, P.CLOSED}),
    P.ABORTING: frozenset({P.READY, P.ABORTING, P.FATAL_ERROR, P.CLOSED}),
    P.ABORTABLE_ERROR: frozenset({P.ABORTING, P.FATAL_ERROR, P.CLOSED}),
    P.FATAL_ERROR: frozenset({P.CLOSED}),
    P.CLOSED: frozenset(),
}


@dataclass
class _Buffer:
    tables: list[pa.Table] = field(default_factory=list)
    nbytes: int = 0


class Producer:
    """Create with ``broker.producer()`` (idempotent) or
    ``broker.producer(transactional_id=..., transaction_timeout_ms=...)``."""

    def __init__(self, broker: Broker, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000) -> None:
        self._broker = broker
        self._settings = broker.settings
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
        self._buffers: dict[tuple[int, int], _Buffer] = {}
        self._pending: list[SegmentWrite] = []  # uploaded, not yet acknowledged
        # encoded and numbered, but the upload failed: the next flush uploads them again
        self._unuploaded: list[tuple[SegmentWrite, pa.Buffer]] = []
        self._next_seq: dict[tuple[int, int], int] = {}
        self._sticky: dict[str, int] = {}
        self._topics: dict[int, TopicMeta] = {}
        self._txn_id: int | None = None
        # a coordinator call of this transaction was made: a transaction may be open even
        # while _txn_id is None (the call's reply was lost), so commit and abort must ask
        self._txn_requested = False
        self._txn_partitions: set[tuple[int, int]] = set()  # added by send() in this transaction
        self._txn_appends: list[AppendResult] = []
        self._uploader: ThreadPoolExecutor | None = None
        #: InvalidPidMappingError was seen (KIP-360): the abort re-initialises
        self._pid_mapping_lost = False
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
        if target not in _TRANSITIONS[self._state]:
            raise InvalidTxnStateError(
                f"producer {self.transactional_id or self.producer_id}: cannot go from "
                f"{self._state.value} to {target.value}"
            )
        self._state = target

    def _require(self, *states: ProducerState, action: str) -> None:
        if self._state == P.FATAL_ERROR:
            raise ProducerFencedError(
                f"producer {self.transactional_id!r} was fenced or failed fatally; create a new one"
            )
        if self._state == P.CLOSED:
            raise IllegalStateError("the producer is closed")
        if self._state in states:
            return
        if self._state == P.ABORTABLE_ERROR:
            raise InvalidTxnStateError(
                f"cannot {action}: the transaction of producer {self.transactional_id!r} failed "
                f"({self._abortable_cause}); call abort_transaction() first"
            )
        raise InvalidTxnStateError(
            f"cannot {action}: producer {self.transactional_id or ''} is {self._state.value}"
            + (" (call init_transactions() first)" if self._state == P.UNINITIALIZED else "")
        )

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
            if isinstance(error, InvalidPidMappingError):
                self._pid_mapping_lost = True
            if error.fatal:
                self._state = P.FATAL_ERROR
                self._discard_buffers()
            elif (error.abortable or isinstance(error, InvalidInputError)) and \
                    self._state in (P.IN_TRANSACTION, P.COMMITTING):
                self._abortable_cause = f"{type(error).__name__}: {error}"
                self._to(P.ABORTABLE_ERROR)
            raise

    def _identity(self) -> ProducerIdentity:
        if self._ident is None:  # an idempotent producer gets its id on first use
            pid = self._broker.coordinator.allocate_producer_id()
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
                self._ident = retrying(lambda: self._broker.coordinator.init_transactions(
                    self.transactional_id or "", self.transaction_timeout_ms))
            self._next_seq.clear()
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
            self._txn_appends = []
            self._to(P.IN_TRANSACTION)

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int], group_id: str) -> None:
        """Commit ``group_id``'s next offsets to read atomically with this transaction."""
        with self._lock:
            self._require(P.IN_TRANSACTION, action="send_offsets_to_transaction")
            validate_id("group id", group_id)
            if not isinstance(offsets, Mapping):
                raise OffsetOutOfRangeError("offsets must be a dict of TopicPartition -> int")
            rows = []
            for tp, offset in offsets.items():
                topic, partition = tp
                meta = self._broker.topics.get(topic)
                validate_partition(partition, meta.partition_count, topic)
                self._broker.check_offset(meta, partition, offset)
                rows.append((meta.topic_id, partition, int(offset)))
            if not rows:
                return
            ident = self._identity()
            with self._guard():
                self._txn_requested = True
                self._txn_id = retrying(
                    lambda: self._broker.coordinator.add_offsets(ident, group_id, rows))
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
            if self._txn_id is None:
                with self._guard():
                    self._txn_requested = True
                    self._txn_id = retrying(lambda: self._broker.coordinator.add_partitions(ident, []))
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
            self._to(P.COMMITTING)
            with self._guard():
                self._flush_all()
                if self._txn_id is not None or self._txn_requested:
                    fault_point("commit.before_end")
                    # txn_id None: a request's lost reply may have opened one; commit that
                    ident, txn_id = self._identity(), self._txn_id
                    retrying(lambda: self._broker.coordinator.end_transaction(
                        ident, txn_id, commit=True))
            appends, self._txn_appends = self._txn_appends, []
            self._txn_id = None
            self._txn_requested = False
            self._to(P.READY)
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
            self._to(P.ABORTING)
            with self._guard():
                self._abort()
            self._to(P.READY)

    def _abort(self) -> None:
        self._buffers.clear()
        if self._pid_mapping_lost:
            # KIP-360: the coordinator forgot this transactional id, so nothing of it is open
            # there and nothing unacknowledged was registered. InitProducerId with the current
            # identity gives a new epoch (a new producer id if the id expired), unless a newer
            # instance took the id meanwhile (ProducerFencedError).
            self._unuploaded, self._pending = [], []
            current = self._identity()
            self._ident = retrying(lambda: self._broker.coordinator.init_transactions(
                self.transactional_id or "", self.transaction_timeout_ms, current=current))
            self._next_seq.clear()
            self._pid_mapping_lost = False
        else:
            self._resolve_pending()
            if self._txn_id is not None or self._txn_requested:
                # txn_id None: abort whatever a request whose reply was lost opened
                ident, txn_id = self._identity(), self._txn_id
                retrying(lambda: self._broker.coordinator.end_transaction(ident, txn_id, commit=False))
        self._txn_id = None
        self._txn_requested = False
        self._txn_appends = []

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
        (nothing buffered), InvalidTxnStateError, ProducerFencedError."""
        with self._lock:
            if self.transactional_id is not None:
                self._require(P.IN_TRANSACTION, action="send")
            else:
                self._require(P.READY, action="send")
            meta = self._broker.topics.get(topic)
            table = to_table(data, meta.schema, topic)
            if table.num_rows == 0:
                return
            check_record_sizes(table, meta.max_message_bytes, topic)
            parts = self._partition(meta, table, key, partition)
            table = with_timestamp(table, int(time.time() * 1000))
            split = self._split(table, parts)
            ident = self._identity()
            self._topics[meta.topic_id] = meta
            if self.transactional_id is not None:
                # AddPartitionsToTxn before the first write to a partition (docs/semantics.md):
                # the first one starts the transaction and its timeout clock now, not at the
                # flush. Later sends only fail a zombie at once. The registration of the
                # data checks the epoch and the open transaction again, under the lock.
                with self._guard():
                    new = sorted((meta.topic_id, p) for p in split if (meta.topic_id, p) not in self._txn_partitions)
                    if new:
                        self._txn_requested = True
                        self._txn_id = retrying(
                            lambda: self._broker.coordinator.add_partitions(ident, new))
                        self._txn_partitions.update(new)
                    else:
                        retrying(lambda: self._broker.coordinator.check_not_fenced(ident))
            full = []
            for p, part in split.items():
                buf = self._buffers.setdefault((meta.topic_id, p), _Buffer())
                buf.tables.append(part)
                buf.nbytes += part.nbytes
                if buf.nbytes >= self._settings.segment_bytes:
                    full.append((meta.topic_id, p))
            if full:
                with self._guard():
                    self._flush(full)

    def _partition(self, meta: TopicMeta, table: pa.Table, key: str | None,
                   partition: int | None) -> np.ndarray | int:
        if partition is not None:
            return validate_partition(partition, meta.partition_count, meta.name)
        if key is not None:
            if key not in meta.schema.names:
                raise SchemaMismatchError(f"key column {key!r} is not a column of topic {meta.name!r}")
            parts = key_partitions(table.column(key), meta.partition_count)
            if (parts < 0).any():  # null keys are spread like unkeyed records
                parts[parts < 0] = self._next_sticky(meta)
            return parts
        return self._next_sticky(meta)

    def _next_sticky(self, meta: TopicMeta) -> int:
        current = self._sticky.get(meta.name)
        nxt = random.randrange(meta.partition_count) if current is None else (current + 1) % meta.partition_count
        self._sticky[meta.name] = nxt
        return nxt

    @staticmethod
    def _split(table: pa.Table, parts: np.ndarray | int) -> dict[int, pa.Table]:
        if isinstance(parts, int):
            return {parts: table}
        out = {}
        for p in np.unique(parts):
            out[int(p)] = table.take(pa.array(np.flatnonzero(parts == p)))
        return out

    # -- flushing ------------------------------------------------------------------------

    def flush(self) -> list[AppendResult]:
        """Upload and register everything buffered. Returns what was appended."""
        with self._lock:
            self._require(P.READY, P.IN_TRANSACTION, P.COMMITTING, action="flush")
            with self._guard():
                return self._flush_all()

    def _flush_all(self) -> list[AppendResult]:
        return self._flush(list(self._buffers))

    def _flush(self, keys: list[tuple[int, int]]) -> list[AppendResult]:
        ident = self._identity()
        # batches whose upload failed before come first: they hold the lower sequences
        staged, self._unuploaded = self._unuploaded, []
        for key in sorted(keys):
            buf = self._buffers.pop(key, None)
            if not buf or not buf.tables:
                continue
            table = pa.concat_tables(buf.tables)
            topic_id, partition = key
            meta = self._topics[topic_id]
            seq = self._next_seq.get(key, 0)
            self._next_seq[key] = seq + 1
            payload = encode_segment(table, meta.compression)
            ts = table.column("_timestamp").cast(pa.int64())
            staged.append((SegmentWrite(
                topic_id=topic_id,
                topic=meta.name,
                partition=partition,
                record_count=table.num_rows,
                size_bytes=len(payload),
                object_key=(f"topics/{topic_id}/{partition}/{ident.producer_id}-{ident.epoch}-"
                            f"{seq}-{uuid.uuid4().hex[:12]}.arrow"),
                base_sequence=seq,
                max_timestamp_ms=int(pc.max(ts).as_py()),  # vectorised: no per-record Python
            ), payload))
        if staged:
            try:
                self._upload(staged)
            except BaseException:
                self._unuploaded = staged  # a retried flush or commit uploads them again
                raise
            self._pending.extend(w for w, _ in staged)
            fault_point("produce.after_upload")
        if not self._pending:
            return []
        results = self._register()
        fault_point("produce.after_register")
        return results

    def _upload(self, staged: list[tuple[SegmentWrite, pa.Buffer]]) -> None:
        store = self._broker.store
        if len(staged) == 1:
            w, data = staged[0]
            retrying(lambda: store.put(w.object_key, data))
            return
        if self._uploader is None:
            self._uploader = ThreadPoolExecutor(self._settings.upload_threads, "txn-broker-upload")
        futures = [self._uploader.submit(retrying, partial(store.put, w.object_key, d))
                   for w, d in staged]
        for f in futures:
            f.result()

    def _register(self) -> list[AppendResult]:
        ident = self._identity()
        if self.transactional_id is not None:
            self._txn_requested = True  # the append starts the transaction if none is open
        for _attempt in range(RETRY_ATTEMPTS):
            try:
                results = retrying(
                    lambda: self._broker.coordinator.append(ident, self._txn_id, self._pending))
            except UnknownProducerStateError:
                # The broker forgot this producer's sequences (producer_id_expiration_ms).
                # Nothing else is in flight, so restart the affected partitions at 0.
                self._restart_sequences()
                continue
            self._pending = []
            if self.transactional_id is not None and results:
                self._txn_id = results[0].txn_id
            self._txn_appends.extend(results)
            return results
        raise UnknownProducerStateError("sequence state could not be re-established")

    def _restart_sequences(self) -> None:
        renumbered: list[SegmentWrite] = []
        counters: dict[tuple[int, int], int] = {}
        for w in sorted(self._pending, key=lambda w: (w.topic_id, w.partition, w.base_sequence)):
            key = (w.topic_id, w.partition)
            seq = counters.get(key, 0)
            counters[key] = seq + 1
            renumbered.append(replace(w, base_sequence=seq))
        self._pending = renumbered
        self._next_seq.update(counters)

    def _resolve_pending(self) -> None:
        """Before dropping unacknowledged uploads (abort), learn which were registered after
        all, so no sequence number is ever reused for different data."""
        for w, _ in self._unuploaded:  # never registered: their sequence numbers are free
            key = (w.topic_id, w.partition)
            self._next_seq[key] = min(self._next_seq.get(key, 0), w.base_sequence)
        self._unuploaded = []
        for w in self._pending:
            stored = retrying(partial(self._broker.segment_registered, w.object_key))
            if not stored:  # never stored: its sequence number is free again
                key = (w.topic_id, w.partition)
                self._next_seq[key] = min(self._next_seq.get(key, 0), w.base_sequence)
        self._pending = []

    def _discard_buffers(self) -> None:
        self._buffers.clear()
        self._pending = []
        self._unuploaded = []

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
                if self._uploader is not None:
                    self._uploader.shutdown(wait=True)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

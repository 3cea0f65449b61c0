"""The transaction coordinator: the transaction log, zombie fencing, atomic commit and
abort, and the sweeps that time out, roll forward and expire. Appends are made here under
the transactional id's lock; the partition log's side of them (idempotence, offsets, the
segment's registration) is :mod:`txn_broker.log.appends`.

It is code running in whichever process calls the broker, serialised through the
database: every decision is made under the row lock of the transactional id
(``FOR UPDATE`` on PostgreSQL, the single writer lock on SQLite).

A transaction starts with its first AddPartitionsToTxn (a producer's first send) or group
offsets. An append adds its partitions too, in the database transaction that registers
the segments (idempotent; it opens the transaction if the producer never learnt of one
because a reply was lost). An append with a stale epoch, or for a transaction that is no
longer the open one, is refused.

Commit is one database transaction (docs/semantics.md: all metadata is in one database):
under the row lock it checks epoch and state, moves Ongoing -> PrepareCommit ->
CompleteCommit (both kept in the history), writes the COMMIT marker into every partition
of the transaction, applies its group offsets and ends it. Readers see all of it at once
(visibility is read from the markers); a crash before the database commits leaves the
transaction Ongoing, for the next ``init_transactions``, timeout sweep or admin abort to
abort. A producer's abort is one database transaction too. An abort forced by the
coordinator (timeout sweep, admin abort) commits the epoch bump that fences the producer
(-> PrepareEpochFence) first, then aborts; a crash between the two is rolled forward by
``init_transactions``, the ``complete_prepared_transactions`` sweep or an admin abort.

Transaction ids come from a PostgreSQL sequence (no row lock: transaction starts do not
queue), or from the ``counters`` row on SQLite, whose writers are serialised anyway.

Every transition of the transaction log and the lock it is made under stay in this one
module, so that they can be read and checked together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import Settings
from .database import Database, Tx
from .errors import (
    ConcurrentTransactionsError,
    InvalidPidMappingError,
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    UnknownTransactionalIdError,
)
from .faults import fault_point
from .log.appends import append_sequenced, append_uploaded
from .log.types import AppendResult, ProducerIdentity, SegmentWrite, TransactionHandle
from .models import OffsetAndMetadata
from .states import IDLE_STATES, PREPARED_STATES, TxnState, check_transition

log = logging.getLogger(__name__)
S = TxnState
MAX_EPOCH = 32767
SWEEP_BATCH = 500


@dataclass
class _IdRow:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    timeout_ms: int
    txn_id: int | None
    txn_start_ms: int | None
    last_update_ms: int
    state_seq: int
    now_ms: int
    #: history entries of transitions not written yet (``_transition(persist=False)``)
    unwritten: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, row: Any) -> _IdRow:
        m = row._mapping
        return cls(**{**m, "state": TxnState(m["state"])})


@dataclass(frozen=True)
class SweepAction:
    """One thing a sweep did."""

    transactional_id: str
    action: str
    producer_id: int
    epoch: int
    txn_id: int | None


def _in_sequence(writes: Sequence[SegmentWrite]) -> list[SegmentWrite]:
    """Segments in the order their sequence checks expect: by partition, then sequence."""
    return sorted(writes, key=lambda w: (w.topic_id, w.partition, w.base_sequence))


class Coordinator:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    # -- the transaction log -------------------------------------------------------------

    def _lock(self, tx: Tx, transactional_id: str, *, skip_locked: bool = False,
              check: Callable[[Tx], None] | None = None) -> _IdRow | None:
        """The id's row, locked. ``check(tx)``, run once it is locked, may refuse the
        request by raising (see ``end_transaction``)."""
        query = "transactional_id_claim" if skip_locked else "transactional_id_for_update"
        row = tx.one(query, transactional_id=transactional_id)
        if check is not None:
            check(tx)
        return _IdRow.of(row) if row else None

    def _transition(self, tx: Tx, row: _IdRow, target: TxnState, reason: str, *, persist: bool = True,
                    **changes: Any) -> None:
        """Move ``row`` to ``target`` and record the transition in the history.
        ``persist=False``: nothing written yet; a later transition in the same database
        transaction writes the row and both history entries (one statement for two: nobody
        can see the state in between, and a commit's two transitions cost one INSERT)."""
        check_transition(row.state, target, row.transactional_id)
        previous = row.state
        for name, value in changes.items():
            setattr(row, name, value)
        row.state = target
        row.state_seq += 1
        row.unwritten.append({
            "producer_id": row.producer_id, "seq": row.state_seq, "transactional_id": row.transactional_id,
            "producer_epoch": row.producer_epoch, "txn_id": row.txn_id, "from_state": previous.value,
            "to_state": target.value, "reason": reason,
        })
        if persist:
            tx.execute_batch(self._row_statements(row))

    @classmethod
    def _row_statements(cls, row: _IdRow) -> list[tuple[str, dict[str, Any]]]:
        """The statements that write ``row`` and its unwritten history (then forgotten)."""
        return [cls._row_statement(row), *cls._history_statements(row)]

    @staticmethod
    def _history_statements(row: _IdRow) -> list[tuple[str, dict[str, Any]]]:
        entries, row.unwritten = row.unwritten, []
        statements: list[tuple[str, dict[str, Any]]] = []
        while len(entries) >= 2:
            first, second = entries[:2]
            statements.append(("insert_state_log_pair",
                               {**first, **{f"{name}_2": value for name, value in second.items()}}))
            entries = entries[2:]
        statements.extend(("insert_state_log", entry) for entry in entries)
        return statements

    @staticmethod
    def _row_statement(row: _IdRow) -> tuple[str, dict[str, Any]]:
        return ("update_transactional_id", {
            "transactional_id": row.transactional_id, "producer_id": row.producer_id,
            "producer_epoch": row.producer_epoch, "state": row.state.value, "timeout_ms": row.timeout_ms,
            "txn_id": row.txn_id, "txn_start_ms": row.txn_start_ms, "state_seq": row.state_seq,
        })

    @staticmethod
    def _check_fenced(row: Any, ident: ProducerIdentity) -> Any:
        """``row`` (anything with producer_id and producer_epoch) if it is ``ident``'s."""
        if row is None:
            raise InvalidPidMappingError(
                f"transactional id {ident.transactional_id!r} expired while producer id "
                f"{ident.producer_id} epoch {ident.epoch} idled; abort the transaction to get a new epoch"
            )
        if row.producer_id != ident.producer_id or row.producer_epoch != ident.epoch:
            raise InvalidProducerEpochError(
                f"transactional id {ident.transactional_id!r} is now held by producer id "
                f"{row.producer_id} epoch {row.producer_epoch}; this instance (producer id "
                f"{ident.producer_id} epoch {ident.epoch}) is fenced"
            )
        return row

    def _bump_epoch(self, tx: Tx, row: _IdRow) -> dict[str, Any]:
        if row.producer_epoch >= MAX_EPOCH:  # exhausted: a new producer id, epoch 0
            return {"producer_id": int(tx.scalar("next_id", name="producer_id")), "producer_epoch": 0}
        return {"producer_id": row.producer_id, "producer_epoch": row.producer_epoch + 1}

    # -- completing a decided transaction (idempotent) -----------------------------------

    def _complete(self, tx: Tx, row: _IdRow, reason: str, *, offsets: bool = True) -> str | None:
        """Finish a prepared transaction: markers in every partition, group offsets, end
        state. Returns 'commit' or 'abort', or None when nothing was prepared.
        ``offsets=False``: the caller knows that no group offsets were staged in it."""
        if row.state == S.PREPARE_EPOCH_FENCE:
            self._transition(tx, row, S.PREPARE_ABORT, reason)
        if row.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            assert row.txn_id is not None
            commit = row.state == S.PREPARE_COMMIT
            outcome = "COMMIT" if commit else "ABORT"
            # the markers, the offsets, the outcome, the row and its history: one round trip
            statements: list[tuple[str, dict[str, Any]]] = [
                ("write_markers", {"txn_id": row.txn_id, "marker": outcome})]
            if commit and offsets:
                statements.append(("apply_txn_offsets", {"txn_id": row.txn_id}))
            statements.append(("end_transaction", {"txn_id": row.txn_id, "outcome": outcome}))
            self._transition(tx, row, S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, reason, persist=False)
            tx.execute_batch([*statements, *self._row_statements(row)])
            return "commit" if commit else "abort"
        return None

    # -- producer requests ---------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A producer id for an idempotent (non-transactional) producer."""
        return int(self.db.run(lambda tx: tx.scalar("next_id", name="producer_id")))

    def init_transactions(self, transactional_id: str, timeout_ms: int,
                          current: ProducerIdentity | None = None, *,
                          check: Callable[[Tx], None] | None = None) -> ProducerIdentity:
        """InitProducerId: fence older instances by bumping the epoch, finish what they
        left (abort Ongoing, roll PrepareCommit/PrepareAbort forward), then return the
        identity this instance must use. Atomic: one database transaction.

        ``current``: the identity of a producer that is recovering (KIP-360) rather than
        starting: if the id expired it gets a new producer id; if the id is still its own
        (same producer id and epoch) it gets the next epoch; if a newer instance holds the
        id, ProducerFencedError. ``check(tx)``: as for ``end_transaction``."""
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or not (
            0 < timeout_ms <= self.settings.max_transaction_timeout_ms
        ):
            raise InvalidTransactionTimeoutError(
                f"transaction_timeout_ms={timeout_ms!r} must be in 1.."
                f"{self.settings.max_transaction_timeout_ms} (max_transaction_timeout_ms)"
            )

        def work(tx: Tx) -> ProducerIdentity:
            row = self._lock(tx, transactional_id, check=check)
            if row is not None and current is not None:
                self._check_fenced(row, current)
            if row is None:
                reason = "init: new transactional id" if current is None else \
                    "init: the producer of an expired transactional id recovers (KIP-360)"
                pid = int(tx.scalar("next_id", name="producer_id"))
                created = tx.one(
                    "insert_transactional_id",
                    transactional_id=transactional_id,
                    producer_id=pid,
                    timeout_ms=timeout_ms,
                )
                if created is not None:
                    tx.execute(
                        "insert_state_log", producer_id=pid, seq=0,
                        transactional_id=transactional_id, producer_epoch=0, txn_id=None,
                        from_state="Dead", to_state="Empty", reason=reason,
                    )
                    return ProducerIdentity(transactional_id, pid, 0)
                row = self._lock(tx, transactional_id)  # another process created it first
                assert row is not None
            bump = self._bump_epoch(tx, row)
            if row.state == S.ONGOING:
                self._transition(tx, row, S.PREPARE_EPOCH_FENCE, "init: fence previous instance", **bump)
                self._complete(tx, row, "init: abort previous instance's transaction")
            elif row.state in PREPARED_STATES:
                self._complete(tx, row, "init: roll forward previous instance's transaction")
                row.producer_id, row.producer_epoch = bump["producer_id"], bump["producer_epoch"]
            else:
                row.producer_id, row.producer_epoch = bump["producer_id"], bump["producer_epoch"]
            self._transition(tx, row, S.EMPTY, "init: new producer epoch", timeout_ms=timeout_ms,
                             txn_start_ms=None)
            return ProducerIdentity(transactional_id, row.producer_id, row.producer_epoch)

        return self.db.run(work)

    def check_not_fenced(self, ident: ProducerIdentity) -> None:
        """A cheap unlocked read: raise ProducerFencedError if a newer instance exists."""
        row = self.db.run(
            lambda tx: tx.one("transactional_id_fence_check", transactional_id=ident.transactional_id),
            write=False,
        )
        self._check_fenced(row, ident)

    def _begin_if_idle(self, tx: Tx, row: _IdRow, reason: str,
                       then: Callable[[int], list[tuple[str, dict[str, Any]]]] | None = None) -> int:
        """The open transaction's id, starting one (-> Ongoing) if the id is idle. ``then``:
        the statements to run next in the transaction of that id (in the same round trip as
        the start's)."""
        following = then or (lambda _txn_id: [])
        if row.state == S.ONGOING:
            assert row.txn_id is not None
            tx.execute_batch(following(row.txn_id))
            return row.txn_id
        if row.state in PREPARED_STATES:
            raise ConcurrentTransactionsError(
                f"transactional id {row.transactional_id!r} is completing transaction "
                f"{row.txn_id} ({row.state}); retry shortly"
            )
        if row.state not in IDLE_STATES:
            raise InvalidTxnStateError(f"transactional id {row.transactional_id!r} is {row.state}")
        txn_id = int(tx.scalar("next_txn_id"))
        start = ("insert_transaction", {
            "txn_id": txn_id, "transactional_id": row.transactional_id, "producer_id": row.producer_id,
            "producer_epoch": row.producer_epoch, "timeout_ms": row.timeout_ms})
        self._transition(tx, row, S.ONGOING, reason, persist=False, txn_id=txn_id, txn_start_ms=row.now_ms)
        tx.execute_batch([start, *self._row_statements(row), *following(txn_id)])
        return txn_id

    def add_partitions(self, ident: ProducerIdentity, partitions: Sequence[tuple[int, int]], *,
                       check: Callable[[Tx], None] | None = None) -> int:
        """AddPartitionsToTxn. Starts the transaction (and its timeout clock) if needed.
        Returns the transaction's id. A producer calls it at the first send to each
        partition; ``Producer.transaction_handle`` calls it with no partitions to open the
        transaction an external writer (Spark) registers into. ``check(tx)``: as for
        ``end_transaction``."""
        assert ident.transactional_id is not None
        tid = ident.transactional_id

        def work(tx: Tx) -> int:
            row = self._check_fenced(self._lock(tx, tid, check=check), ident)
            return self._begin_if_idle(tx, row, "add partitions", then=lambda txn_id: [
                ("add_txn_partition", {"txn_id": txn_id, "topic_id": topic_id, "partition_no": partition})
                for topic_id, partition in sorted(set(partitions))])

        return self.db.run(work)

    def add_offsets(
        self, ident: ProducerIdentity, group_id: str, offsets: Sequence[tuple[int, int, int | OffsetAndMetadata]],
        check: Callable[[Tx], None] | None = None,
    ) -> int:
        """AddOffsetsToTxn + TxnOffsetCommit: stage ``(topic_id, partition, offset)`` for
        ``group_id`` (an OffsetAndMetadata to keep a metadata string and leader epoch); they
        become the group's offsets only if the transaction commits. ``check(tx)``: as for
        ``end_transaction``."""
        assert ident.transactional_id is not None
        tid = ident.transactional_id

        def work(tx: Tx) -> int:
            row = self._check_fenced(self._lock(tx, tid, check=check), ident)
            txn_id = self._begin_if_idle(tx, row, "add offsets")
            for topic_id, partition, value in sorted(offsets, key=lambda o: (o[0], o[1])):
                committed = OffsetAndMetadata.checked(value)
                tx.execute(
                    "upsert_txn_offset", txn_id=txn_id, group_id=group_id, topic_id=topic_id,
                    partition_no=partition, committed_offset=committed.offset,
                    metadata=committed.metadata_column(), leader_epoch=committed.leader_epoch,
                )
            return txn_id

        return self.db.run(work)

    def append(
        self, ident: ProducerIdentity, txn_id: int | None, writes: Sequence[SegmentWrite], *, begin: bool = True
    ) -> list[AppendResult]:
        """Register uploaded segments: check the epoch, check each batch's sequence number,
        assign offsets. All or nothing, one database transaction.

        A transactional append adds its partitions to the transaction (KIP-890 part 2).
        ``txn_id``: the transaction the producer knows to be open, which must still be the
        open one; None if it knows of none: starts one (and its timeout clock) if the id is
        idle, or joins the one this instance (same epoch) has open, started by a request
        whose reply was lost. ``begin=False``: never starts one, only joins the open one,
        and only in partitions already added to it (KIP-890: a Kafka client's
        transactional produce must follow its AddPartitionsToTxn; a Produce its client gave
        up on and read late must not join the client's next transaction). Each result
        carries the transaction's id.

        Raises ProducerFencedError, InvalidTxnStateError (that transaction ended: a late
        append), ConcurrentTransactionsError, OutOfOrderSequenceError,
        UnknownTopicOrPartitionError. A batch stored before (a retry) is answered with its
        original offsets and ``duplicate=True``."""

        def work(tx: Tx) -> list[AppendResult]:
            open_txn = None
            if ident.transactional_id is not None:
                row = self._check_fenced(self._lock(tx, ident.transactional_id), ident)
                if txn_id is None and not begin:
                    if row.state != S.ONGOING or row.txn_id is None:
                        raise InvalidTxnStateError(
                            f"transactional id {ident.transactional_id!r} has no open transaction "
                            f"({row.state}): AddPartitionsToTxn must come first")
                    open_txn = row.txn_id
                elif txn_id is None:
                    open_txn = self._begin_if_idle(tx, row, "first append")
                elif row.state == S.ONGOING and row.txn_id == txn_id:
                    open_txn = txn_id
                else:
                    raise InvalidTxnStateError(
                        f"transactional id {ident.transactional_id!r}: transaction {txn_id} is not "
                        f"open (state {row.state}); the append is refused"
                    )
            added_only = open_txn is not None and not begin
            return [append_sequenced(tx, ident, open_txn, w, added_only=added_only) for w in _in_sequence(writes)]

        return self.db.run(work)

    def register_uploaded(
        self, handle: TransactionHandle, writes: Sequence[SegmentWrite]
    ) -> list[AppendResult]:
        """Register segments that other processes (Spark executors) uploaded, for the
        producer and open transaction in ``handle``: adds their partitions to the
        transaction and appends them, in one database transaction, fenced by epoch.

        These appends are idempotent by object key instead of by sequence number (the
        uploading tasks cannot share a sequence counter): registering the same object key
        again answers its original offsets with ``duplicate=True``. They leave the
        producer's sequence numbers alone."""
        ident = handle.identity

        def work(tx: Tx) -> list[AppendResult]:
            if ident.transactional_id is not None:
                row = self._check_fenced(self._lock(tx, ident.transactional_id), ident)
                if row.state != S.ONGOING or row.txn_id != handle.txn_id:
                    raise InvalidTxnStateError(
                        f"transactional id {ident.transactional_id!r}: transaction {handle.txn_id} "
                        f"is not open (state {row.state}); the write is refused"
                    )
            results = []
            for w in sorted(writes, key=lambda w: (w.topic_id, w.partition, w.object_key)):
                results.append(append_uploaded(tx, ident, handle.txn_id, w))
            return results

        return self.db.run(work)

    def end_transaction(self, ident: ProducerIdentity, txn_id: int | None, commit: bool, *,
                        offsets: bool = True, check: Callable[[Tx], None] | None = None) -> None:
        """EndTxn, as one database transaction: under the transactional id's row lock,
        check the epoch and state, move Ongoing -> PrepareCommit (PrepareAbort) ->
        CompleteCommit (CompleteAbort), both recorded in the history, write the markers,
        apply the group offsets (commit only) and end the transaction. A crash before the
        database commits leaves the transaction Ongoing, for the next coordinator action
        to abort; after, it is complete.

        ``txn_id`` None: the transaction this producer instance (same id and epoch) has
        open, if any; a request whose reply was lost may have started it. Nothing open
        is success. Retried after a lost reply, it answers success and changes nothing.
        ``offsets=False``: the producer never asked to stage group offsets in this
        transaction (not even by a request whose reply was lost), so a commit need not look
        for any. ``check(tx)``, run in the same database transaction once the id's row is
        locked, may refuse the request by raising (nothing is written): a request must not
        run once its client gave up on it and sent it again, perhaps through another
        listener (kafka/peer.py). Raises ProducerFencedError, InvalidTxnStateError."""
        assert ident.transactional_id is not None
        tid = ident.transactional_id
        prepared = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        completed = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        verb = "commit" if commit else "abort"

        def work(tx: Tx) -> None:
            row = self._lock(tx, tid, check=check)
            if row is not None and row.producer_id == ident.producer_id and row.producer_epoch == ident.epoch \
                    and (txn_id is None or row.txn_id == txn_id):
                if row.state == completed or (txn_id is None and row.state in IDLE_STATES):
                    return  # done before (the reply was lost), or nothing was ever opened
                if row.state == prepared:  # decided by an earlier two-step EndTxn: roll forward
                    self._complete(tx, row, f"{verb} completed by the producer", offsets=offsets)
                    return
            row = self._check_fenced(row, ident)
            if row.state != S.ONGOING or (txn_id is not None and row.txn_id != txn_id):
                raise InvalidTxnStateError(
                    f"cannot {verb} transaction {txn_id} of {tid!r}: it is {row.state}"
                )
            self._transition(tx, row, prepared, f"{verb} requested by the producer", persist=False)
            self._complete(tx, row, f"{verb} completed by the producer", offsets=offsets)
            fault_point(f"{verb}.during_end")  # all written, not committed: a crash undoes all of it

        self.db.run(work)
        fault_point(f"{verb}.after_end")

    def append_and_commit(
        self, ident: ProducerIdentity, txn_id: int, writes: Sequence[SegmentWrite], *, offsets: bool = True
    ) -> list[AppendResult]:
        """Register the transaction's last uploaded segments and commit it, in one database
        transaction: ``append`` then ``end_transaction(commit=True)`` without a durable
        commit in between. The segments get their offsets at the moment the transaction
        commits, so no reader ever sees them open.

        Retried after a lost reply it finds the transaction committed and answers the
        stored offsets (``duplicate=True``), writing nothing. ``offsets`` as for
        ``end_transaction``. Raises what ``append`` and ``end_transaction`` raise; on any
        error nothing of it is written."""
        assert ident.transactional_id is not None
        tid = ident.transactional_id
        ordered = _in_sequence(writes)

        def work(tx: Tx) -> list[AppendResult]:
            row = self._check_fenced(self._lock(tx, tid), ident)
            if row.txn_id == txn_id and row.state == S.COMPLETE_COMMIT:
                # done before, its reply lost: all of it was committed in that transaction
                results = [append_sequenced(tx, ident, txn_id, w) for w in ordered]
                if not all(r.duplicate for r in results):
                    raise InvalidTxnStateError(
                        f"transaction {txn_id} of {tid!r} committed without a segment of this commit")
                return results
            if row.state != S.ONGOING or row.txn_id != txn_id:
                raise InvalidTxnStateError(
                    f"cannot commit transaction {txn_id} of {tid!r}: it is {row.state}"
                )
            results = [append_sequenced(tx, ident, txn_id, w) for w in ordered]
            self._transition(tx, row, S.PREPARE_COMMIT, "commit requested by the producer", persist=False)
            self._complete(tx, row, "commit completed by the producer", offsets=offsets)
            fault_point("commit.during_end")  # all written, not committed: a crash undoes all of it
            return results

        results = self.db.run(work)
        fault_point("commit.after_end")
        return results

    # -- sweeps and admin ----------------------------------------------------------------

    def _fence_and_abort(self, tid: str, reason: str, *, only_expired: bool) -> SweepAction | None:
        """Bump the epoch (fencing the producer) and abort its open transaction, as two
        database transactions; a crash between them is finished by the prepared sweep."""

        def fence(tx: Tx) -> SweepAction | None:
            row = self._lock(tx, tid, skip_locked=only_expired)
            if row is None:
                return None
            fault_point("sweep.after_claim")
            if row.state != S.ONGOING:
                return None
            if only_expired and (row.txn_start_ms or 0) + row.timeout_ms >= row.now_ms:
                return None
            self._transition(tx, row, S.PREPARE_EPOCH_FENCE, reason, **self._bump_epoch(tx, row))
            return SweepAction(tid, "aborted", row.producer_id, row.producer_epoch, row.txn_id)

        action = self.db.run(fence)
        if action is None:
            return None
        fault_point("sweep.after_fence")
        self._complete_one(tid, reason, skip_locked=False)
        return action

    def _complete_one(self, tid: str, reason: str, *, skip_locked: bool = True) -> SweepAction | None:
        def work(tx: Tx) -> SweepAction | None:
            row = self._lock(tx, tid, skip_locked=skip_locked)
            if row is None or row.state not in PREPARED_STATES:
                return None
            outcome = self._complete(tx, row, reason)
            return SweepAction(tid, f"completed {outcome}", row.producer_id, row.producer_epoch, row.txn_id)

        return self.db.run(work)

    def abort_expired_transactions(self) -> list[SweepAction]:
        """Abort every Ongoing transaction older than its timeout: bump the epoch first
        (so the producer, if it wakes up, is fenced), then abort with the new epoch."""
        done = []
        for tid in self._ids("expired_transactions"):
            action = self._fence_and_abort(tid, "timeout: aborted by the coordinator", only_expired=True)
            if action:
                log.info("aborted expired transaction %s of %r", action.txn_id, tid)
                done.append(action)
        return done

    def complete_prepared_transactions(self, grace_ms: int | None = None) -> list[SweepAction]:
        """Roll forward every PrepareCommit / PrepareAbort / PrepareEpochFence."""
        grace = self.settings.complete_prepared_grace_ms if grace_ms is None else grace_ms
        done = []
        for tid in self._ids("prepared_transactions", grace_ms=grace):
            action = self._complete_one(tid, "sweep: roll forward a decided transaction")
            if action:
                done.append(action)
        return done

    def expire_transactional_ids(self) -> dict[str, Any]:
        """Remove idle transactional ids whose last transaction ended longer ago than
        transactional_id_expiration_ms, and forget the sequence state of producers idle
        longer than producer_id_expiration_ms."""
        expiration = self.settings.transactional_id_expiration_ms
        expired = []
        for tid in self._ids("expirable_transactional_ids", expiration_ms=expiration):

            def work(tx: Tx, tid: str = tid) -> SweepAction | None:
                row = self._lock(tx, tid, skip_locked=True)
                if row is None or row.state not in IDLE_STATES or \
                        row.last_update_ms >= row.now_ms - expiration:
                    return None
                self._transition(tx, row, S.DEAD, "expired: idle longer than transactional_id_expiration_ms")
                tx.execute("delete_transactional_id", transactional_id=tid)
                return SweepAction(tid, "expired", row.producer_id, row.producer_epoch, row.txn_id)

            action = self.db.run(work)
            if action:
                expired.append(action)
        states = self.db.run(
            lambda tx: tx.execute("expire_producer_state", expiration_ms=self.settings.producer_id_expiration_ms)
        )
        return {"transactional_ids": expired, "producer_states_removed": states}

    def admin_abort(self, tid: str) -> SweepAction:
        """Abort the open transaction of ``tid`` now, fencing its producer."""
        action = self._fence_and_abort(tid, "aborted by an administrator", only_expired=False)
        if action is not None:
            return action
        completed = self._complete_one(tid, "administrator: roll forward a decided transaction")
        if completed is not None:
            return completed
        row = self.db.run(lambda tx: tx.one("transactional_id_fence_check", transactional_id=tid), write=False)
        if row is None:
            raise UnknownTransactionalIdError(f"no transactional id {tid!r}")
        raise InvalidTxnStateError(f"transactional id {tid!r} has no open transaction (state {row.state})")

    def _ids(self, query: str, **params: Any) -> Iterable[str]:
        rows = self.db.run(lambda tx: tx.all(query, limit=SWEEP_BATCH, **params), write=False)
        return [r.transactional_id for r in rows]

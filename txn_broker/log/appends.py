"""Appending to a partition's log: the idempotence check (by sequence number, or by
object key for segments other processes uploaded), offset assignment under the
partition's row lock, and the segment's registration, with its entry in the open
transaction. Each function runs inside the caller's database transaction: the
coordinator calls them under the transactional id's lock, after its fencing checks."""

from __future__ import annotations

from typing import Any

from ..database import Database, Tx
from ..errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    UnknownProducerStateError,
    UnknownTopicOrPartitionError,
)
from .types import AppendResult, ProducerIdentity, SegmentWrite


def append_sequenced(tx: Tx, ident: ProducerIdentity, txn_id: int | None, w: SegmentWrite, *,
                     added_only: bool = False) -> AppendResult:
    """Append ``w`` if its sequence number is the next of (producer, partition); answer
    the stored offsets (``duplicate=True``) for a retry of a batch already stored.
    ``added_only``: a transactional append only to a partition already in the transaction
    (InvalidTxnStateError otherwise), as a Kafka broker verifies it (KIP-890)."""
    key = {"producer_id": ident.producer_id, "topic_id": w.topic_id, "partition_no": w.partition}
    last = w.base_sequence if w.last_sequence is None else w.last_sequence
    if last >= w.base_sequence and tx.execute(
            "advance_producer_sequence", **key, producer_epoch=ident.epoch, last_sequence=last,
            previous_sequence=w.base_sequence - 1) == 1:
        # the next batch in the same epoch (checked and recorded by that one statement)
        return _insert_segment(tx, ident, txn_id, w, base_sequence=w.base_sequence, added_only=added_only)
    state = tx.one("producer_state_for_update", **key)
    if state is not None and state.producer_epoch > ident.epoch:
        raise InvalidProducerEpochError(
            f"producer id {ident.producer_id} epoch {ident.epoch} is older than epoch "
            f"{state.producer_epoch} seen on {w.topic}-{w.partition}; fenced"
        )
    if state is None or state.producer_epoch < ident.epoch:
        expected = 0
    else:
        if w.base_sequence <= state.last_sequence:
            stored = tx.one("segment_by_sequence", base_sequence=w.base_sequence,
                            producer_epoch=ident.epoch, **key)
            # numbered by record, a retry is a new object holding the same records: the
            # same first sequence and count is the same batch (as Kafka decides)
            same_batch = stored is not None and (
                stored.object_key == w.object_key
                or (w.last_sequence is not None and stored.record_count == w.record_count))
            if (stored is not None or w.last_sequence is not None) and not same_batch:
                raise OutOfOrderSequenceError(
                    f"sequence {w.base_sequence} on {w.topic}-{w.partition} of producer id "
                    f"{ident.producer_id} was used by another batch; expected "
                    f"{state.last_sequence + 1}"
                )
            return AppendResult(
                w.topic, w.partition, stored.base_offset if stored else -1,
                stored.record_count if stored else w.record_count, duplicate=True, txn_id=txn_id,
            )
        expected = state.last_sequence + 1
    if w.base_sequence != expected:
        error = UnknownProducerStateError if state is None else OutOfOrderSequenceError
        raise error(
            f"out of order sequence on {w.topic}-{w.partition} from producer id "
            f"{ident.producer_id}: got {w.base_sequence}, expected {expected}"
        )
    if last < w.base_sequence:
        raise OutOfOrderSequenceError(
            f"batch on {w.topic}-{w.partition} ends at sequence {last}, before its first {w.base_sequence}")
    tx.execute("upsert_producer_state", **key, producer_epoch=ident.epoch, last_sequence=last)
    return _insert_segment(tx, ident, txn_id, w, base_sequence=w.base_sequence, added_only=added_only)


def append_uploaded(tx: Tx, ident: ProducerIdentity, txn_id: int | None, w: SegmentWrite) -> AppendResult:
    """Append ``w``, idempotent by object key (the uploading tasks cannot share a sequence
    counter): an object key registered before answers its original offsets with
    ``duplicate=True``. The producer's sequence numbers are left alone."""
    stored = tx.one("segment_by_object_key", object_key=w.object_key)
    if stored is not None:
        return AppendResult(w.topic, w.partition, stored.base_offset, stored.record_count, duplicate=True,
                            txn_id=txn_id)
    return _insert_segment(tx, ident, txn_id, w, base_sequence=-1)


def _insert_segment(
    tx: Tx, ident: ProducerIdentity, txn_id: int | None, w: SegmentWrite, base_sequence: int,
    added_only: bool = False,
) -> AppendResult:
    """Assign offsets (locking the partition row), register the segment and, in a
    transaction, add the partition to the transaction or note the append in its entry
    (one statement)."""
    allocated = tx.one(
        "allocate_offsets", record_count=w.record_count, topic_id=w.topic_id, partition_no=w.partition
    )
    if allocated is None:
        raise UnknownTopicOrPartitionError(f"topic partition {w.topic}-{w.partition} no longer exists")
    base_offset = int(allocated.high_watermark) - w.record_count
    statements: list[tuple[str, dict[str, Any]]] = [("insert_segment", {
        "producer_id": ident.producer_id, "topic_id": w.topic_id, "partition_no": w.partition,
        "base_offset": base_offset, "record_count": w.record_count, "size_bytes": w.size_bytes,
        "object_key": w.object_key, "producer_epoch": ident.epoch, "base_sequence": base_sequence,
        "txn_id": txn_id, "max_timestamp_ms": w.max_timestamp_ms, "schema_version": w.schema_version})]
    if txn_id is not None:
        statements.append(("add_txn_append_added" if added_only else "add_txn_append", {
            "txn_id": txn_id, "topic_id": w.topic_id, "partition_no": w.partition, "base_offset": base_offset,
            "last_offset": base_offset + w.record_count - 1, "record_count": w.record_count,
            "size_bytes": w.size_bytes}))
    changed = tx.execute_batch(statements)  # one round trip; the count is add_txn_append's
    if txn_id is not None and changed != 1:  # its marker is written: the caller checked the state, so never
        if added_only:
            raise InvalidTxnStateError(
                f"{w.topic}-{w.partition} is not in transaction {txn_id}: AddPartitionsToTxn must come first "
                "(or the request was sent for an earlier transaction); the append is refused")
        raise InvalidTxnStateError(
            f"transaction {txn_id} has ended in {w.topic}-{w.partition}; the append is refused"
        )
    return AppendResult(w.topic, w.partition, base_offset, w.record_count, txn_id=txn_id,
                        log_start_offset=int(allocated.log_start_offset))


def segment_registered(db: Database, object_key: str) -> bool:
    """Whether an uploaded object was registered as a segment."""
    row = db.run(lambda tx: tx.one("segment_by_object_key", object_key=object_key), write=False)
    return row is not None

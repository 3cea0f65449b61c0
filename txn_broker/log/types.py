"""The values that travel on the data path: who writes (a producer identity, or the
handle an external writer gets for an open transaction), what is appended (an uploaded
segment) and what an append answers. Plain values, shared by the producer, the Spark
writer, the Kafka listener and the coordinator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProducerIdentity:
    """Who is writing: the transactional id (None for an idempotent producer), the
    producer id the coordinator gave it, and its epoch."""

    transactional_id: str | None
    producer_id: int
    epoch: int


@dataclass(frozen=True)
class TransactionHandle:
    """What an external writer (a Spark job) needs to write into an open transaction:
    the producer identity and the transaction's id (None: idempotent, no transaction).
    Plain values, so it can be passed as options to other processes."""

    transactional_id: str | None
    producer_id: int
    epoch: int
    txn_id: int | None

    @property
    def identity(self) -> ProducerIdentity:
        return ProducerIdentity(self.transactional_id, self.producer_id, self.epoch)


@dataclass(frozen=True)
class SegmentWrite:
    """A fully uploaded segment object to register in a partition's log."""

    topic_id: int
    topic: str
    partition: int
    record_count: int
    size_bytes: int
    object_key: str
    base_sequence: int
    max_timestamp_ms: int
    #: the sequence number of the segment's last record, for writers that number records
    #: (Kafka's protocol: a batch of n records holds base_sequence .. base_sequence + n - 1).
    #: None: the segment takes one sequence number (the Python producer numbers segments).
    last_sequence: int | None = None
    #: the topic schema version the segment was encoded in
    schema_version: int = 1


@dataclass(frozen=True)
class AppendResult:
    topic: str
    partition: int
    base_offset: int
    record_count: int
    #: True when an earlier attempt had stored it already (DuplicateSequence: success)
    duplicate: bool = False
    #: the transaction the segment belongs to (None: not transactional)
    txn_id: int | None = None
    #: the partition's log start offset when the segment was appended (-1: not read, as
    #: for a duplicate)
    log_start_offset: int = -1

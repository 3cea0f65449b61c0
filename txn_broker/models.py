"""The values the broker's API returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from .errors import InvalidInputError, OffsetMetadataTooLargeError
from .states import is_hanging, open_age_ms


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A group's committed offset (the next offset to read) with what the committer
    attached to it, as Kafka's clients commit it: a free-form ``metadata`` string and the
    ``leader_epoch`` of the last record read (None: not given). Accepted wherever a
    committed offset is (``commit_offsets``, ``send_offsets_to_transaction``) in place of
    the bare int."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None

    @classmethod
    def checked(cls, value: object) -> OffsetAndMetadata:
        """``value`` (an int: an offset with no metadata, or an OffsetAndMetadata) with its
        metadata and epoch checked; the offset itself is checked against its partition by
        the caller."""
        committed = value if isinstance(value, OffsetAndMetadata) else cls(value)  # type: ignore[arg-type]
        if not isinstance(committed.metadata, str):
            raise InvalidInputError(f"offset metadata must be a str, got {committed.metadata!r}")
        if len(committed.metadata) > MAX_OFFSET_METADATA:
            raise OffsetMetadataTooLargeError(
                f"offset metadata of {len(committed.metadata)} characters (at most {MAX_OFFSET_METADATA})")
        epoch = committed.leader_epoch
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool)):
            raise InvalidInputError(f"leader_epoch must be an int or None, got {epoch!r}")
        return committed


    def metadata_column(self) -> str | None:
        """The metadata as stored: a JSON string literal (PostgreSQL's text cannot hold the
        NUL that librdkafka ends its metadata with), NULL for none."""
        return json.dumps(self.metadata) if self.metadata else None

    @classmethod
    def from_columns(cls, offset: int, metadata: str | None, leader_epoch: int | None) -> OffsetAndMetadata:
        """A stored committed offset (see :meth:`metadata_column`)."""
        return cls(int(offset), json.loads(metadata) if metadata else "",
                   None if leader_epoch is None else int(leader_epoch))


#: the longest metadata string a committed offset may carry (Kafka's offset.metadata.max.bytes)
MAX_OFFSET_METADATA = 4096


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    segment_count: int
    size_bytes: int


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionInfo]
    schema: pa.Schema
    config: dict[str, int]
    topic_id: int
    created_ms: int
    #: the latest schema version (``schema`` is it, with field ids in its fields' metadata)
    schema_version: int = 1
    #: every version, oldest first (txn_broker.topic_schemas.SchemaVersion)
    schema_versions: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class TopicSpec:
    """A topic as a pipeline declares it: what ``Broker.ensure_topics`` creates, or checks
    an existing topic against. ``schema`` None: Kafka's record shape for a new topic, and
    any schema for an existing one. ``config``: for a new topic (an existing one keeps its
    own)."""

    name: str
    partitions: int = 1
    schema: pa.Schema | None = None
    config: dict[str, Any] | None = None


@dataclass(frozen=True)
class GroupPartition:
    topic: str
    partition: int
    committed_offset: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    commit_ms: int

    @property
    def lag(self) -> int:
        """Records a read_committed consumer has still to read: up to the last stable offset."""
        return max(self.last_stable_offset - self.committed_offset, 0)

    @property
    def lag_uncommitted(self) -> int:
        """Records a read_uncommitted consumer has still to read: up to the high watermark."""
        return max(self.high_watermark - self.committed_offset, 0)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    partitions: list[GroupPartition]

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


@dataclass(frozen=True)
class TransactionSummary:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    txn_id: int | None
    txn_start_ms: int | None
    last_update_ms: int
    partition_count: int
    record_count: int
    size_bytes: int
    now_ms: int
    #: the current (or last) transaction's outcome, ``COMMIT`` or ``ABORT`` (None while open
    #: or before the first transaction) and when it ended, by the database clock
    outcome: str | None = None
    end_ms: int | None = None

    @property
    def age_ms(self) -> int | None:
        """How long the open transaction has run (None when none is open)."""
        return open_age_ms(self.state, self.txn_start_ms, self.now_ms)

    @property
    def is_hanging(self) -> bool:
        """``Ongoing`` for longer than its own timeout (:func:`txn_broker.states.is_hanging`)."""
        return is_hanging(self.state, self.txn_start_ms, self.timeout_ms, self.now_ms)


@dataclass(frozen=True)
class TxnPartition:
    topic: str
    partition: int
    first_offset: int | None
    last_offset: int | None
    record_count: int
    size_bytes: int
    marker: str | None
    marker_offset: int | None
    marker_ms: int | None


@dataclass(frozen=True)
class StateChange:
    from_state: str
    to_state: str
    at_ms: int
    producer_id: int
    producer_epoch: int
    txn_id: int | None
    reason: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    txn_id: int | None
    start_ms: int | None
    last_update_ms: int
    partitions: list[TxnPartition]
    pending_offsets: list[dict[str, Any]]
    segments: list[dict[str, Any]]
    history: list[StateChange]
    transactions: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class HangingTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_id: int
    start_ms: int
    timeout_ms: int
    age_ms: int
    partitions: list[TopicPartition]
    first_offsets: dict[TopicPartition, int]


@dataclass(frozen=True)
class SchemaUpgrade:
    """What :func:`txn_broker.upgrade_schema` did: the database (password masked), the
    migrations it applied (none when the schema was current) and the current version."""

    database: str
    applied: list[str]
    current_version: str

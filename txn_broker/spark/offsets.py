"""Which offsets a bounded read covers: resolving ``startingOffsets`` / ``endingOffsets`` /
``group.id`` to one fixed ``[start, end)`` per partition, in one database snapshot.

Offsets are given as Spark's Kafka source gives them: ``earliest``, ``latest``, or JSON per
partition, ``{"orders": {"0": 23, "1": -2}}`` with -2 for earliest and -1 for latest.
Partitions (or topics) the JSON does not name take the default: earliest for the start,
latest for the end. With ``group.id`` the group's committed offset is the start wherever the
group has one; ``startingOffsets`` applies to the other partitions (like Kafka's
``auto.offset.reset``).

The end is fixed once, when the read is resolved, so the read is bounded and repeatable:
``latest`` is the last stable offset for read_committed (the high watermark for
read_uncommitted). For read_committed the ends are then made **atomic**: a committed
transaction that wrote several of the partitions read is either inside the read in all of
them or in none (an open transaction on one partition holds that partition's end back, so
without this a later committed transaction could be cut in two). Its records are read by
the next batch, which starts where this one ended.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..database import Tx
from ..errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from ..log.cut import atomic_ends
from ..log.partition import READ_COMMITTED, partition_offsets
from ..models import TopicPartition

if TYPE_CHECKING:
    from ..broker import Broker
    from ..topics import TopicMeta

EARLIEST = -2
LATEST = -1
#: the schema metadata key (on the ``_offset`` column) holding a read's resolved offsets
METADATA_KEY = "txn_topic.offsets"


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """Offsets in the range (aborted records occupy offsets too)."""
        return max(self.end - self.start, 0)


@dataclass(frozen=True)
class OffsetRanges:
    """The fixed ``[start, end)`` of every partition of a read, in topic and partition order."""

    ranges: tuple[OffsetRange, ...]
    isolation_level: str = READ_COMMITTED
    group_id: str | None = None

    def __iter__(self) -> Any:
        return iter(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    @property
    def topics(self) -> list[str]:
        return list(dict.fromkeys(r.topic for r in self.ranges))

    def starting(self) -> dict[TopicPartition, int]:
        return {TopicPartition(r.topic, r.partition): r.start for r in self.ranges}

    def ending(self) -> dict[TopicPartition, int]:
        """The next offsets to read after this batch: what a consumer group commits (pass
        them to ``producer.send_offsets_to_transaction``)."""
        return {TopicPartition(r.topic, r.partition): r.end for r in self.ranges}

    def only(self, topics: Iterable[str]) -> OffsetRanges:
        wanted = set(topics)
        return OffsetRanges(tuple(r for r in self.ranges if r.topic in wanted), self.isolation_level,
                            self.group_id)

    def starting_json(self) -> str:
        return _to_json({(r.topic, r.partition): r.start for r in self.ranges})

    def ending_json(self) -> str:
        return _to_json({(r.topic, r.partition): r.end for r in self.ranges})

    def read_options(self) -> dict[str, str]:
        """``topics``, ``startingOffsets``, ``endingOffsets`` and ``isolation.level`` options
        that make a ``txn_topic`` read cover exactly these ranges."""
        return {"topics": ",".join(self.topics), "startingOffsets": self.starting_json(),
                "endingOffsets": self.ending_json(), "isolation.level": self.isolation_level}

    def to_json(self) -> str:
        return json.dumps({"isolation_level": self.isolation_level, "group_id": self.group_id,
                           "ranges": [[r.topic, r.partition, r.start, r.end] for r in self.ranges]},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> OffsetRanges:
        data = json.loads(text)
        return cls(tuple(OffsetRange(t, int(p), int(s), int(e)) for t, p, s, e in data["ranges"]),
                   data["isolation_level"], data.get("group_id"))


def _to_json(offsets: Mapping[tuple[str, int], int]) -> str:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in offsets.items():
        out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


@dataclass
class OffsetSpec:
    """``earliest`` / ``latest`` / per-partition JSON, as parsed from an option."""

    option: str
    default: int
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)

    def get(self, topic: str, partition: int) -> int:
        return self.per_partition.get((topic, partition), self.default)


def parse_offsets(option: str, text: str, default: int) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or Kafka-style JSON. Raises InvalidConfigError."""
    value = text.strip()
    if value.lower() == "earliest":
        return OffsetSpec(option, EARLIEST)
    if value.lower() == "latest":
        return OffsetSpec(option, LATEST)
    try:
        data = json.loads(value)
    except ValueError:
        raise InvalidConfigError(
            f"option {option} must be earliest, latest or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {text!r}'
        ) from None
    if not isinstance(data, dict):
        raise InvalidConfigError(f"option {option}: JSON must map topic -> {{partition: offset}}")
    spec = OffsetSpec(option, default)
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise InvalidConfigError(f"option {option}: topic {topic!r} must map partition -> offset")
        spec.topics.add(topic)
        for partition, offset in parts.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"option {option}: partition {partition!r} is not a number") from None
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
                raise InvalidConfigError(
                    f"option {option}: offset of {topic}-{p} must be an int >= 0, or -2 (earliest) / "
                    f"-1 (latest), got {offset!r}"
                )
            spec.per_partition[(topic, p)] = offset
    return spec


def resolve_offsets(broker: Broker, topics: str | Iterable[str], starting: str = "earliest",
                    ending: str = "latest", *, isolation_level: str = READ_COMMITTED,
                    group_id: str | None = None, fail_on_data_loss: bool = True) -> OffsetRanges:
    """Fix the ``[start, end)`` of every partition of ``topics``, in one database snapshot
    (see the module docstring). The result's ``read_options()`` make a ``txn_topic`` read
    cover exactly these ranges, and ``ending()`` are the offsets to commit for the group.

    Raises UnknownTopicOrPartitionError, InvalidConfigError (bad offsets option),
    OffsetOutOfRangeError (an offset outside the log; with ``fail_on_data_loss=False`` a
    start below the log start, deleted by retention, moves up to the log start instead)."""
    names = [topics] if isinstance(topics, str) else list(topics)
    metas = [broker._topics.get(t, refresh=True) for t in dict.fromkeys(names)]
    start_spec = parse_offsets("startingOffsets", starting, EARLIEST)
    end_spec = parse_offsets("endingOffsets", ending, LATEST)
    if end_spec.default == EARLIEST or EARLIEST in end_spec.per_partition.values():
        raise InvalidConfigError("option endingOffsets cannot be earliest (-2): the read would be empty")
    for spec in (start_spec, end_spec):
        unknown = spec.topics - {m.name for m in metas}
        if unknown:
            raise InvalidConfigError(f"option {spec.option} names topics that are not read: {sorted(unknown)}")
        for (topic, partition) in spec.per_partition:
            meta = next(m for m in metas if m.name == topic)
            if not 0 <= partition < meta.partition_count:
                raise UnknownTopicOrPartitionError(
                    f"option {spec.option}: topic {topic!r} has partitions 0..{meta.partition_count - 1}; "
                    f"no partition {partition}"
                )

    def work(tx: Tx) -> OffsetRanges:
        ranges: list[OffsetRange] = []
        latest_ends: set[tuple[str, int]] = set()
        for meta in metas:
            committed: dict[int, int] = {}
            if group_id is not None:
                committed = {r.partition_no: r.committed_offset
                             for r in tx.all("group_offsets_for_topic", group_id=group_id, topic_id=meta.topic_id)}
            for p in range(meta.partition_count):
                offsets = partition_offsets(tx, meta.topic_id, p)
                if offsets is None:
                    raise UnknownTopicOrPartitionError(f"{meta.name}-{p} no longer exists")
                readable_end = offsets.end(isolation_level)
                start = committed.get(p)
                if start is None:
                    wanted = start_spec.get(meta.name, p)
                    start = {EARLIEST: offsets.log_start_offset, LATEST: readable_end}.get(wanted, wanted)
                if start < offsets.log_start_offset:
                    if fail_on_data_loss:
                        raise OffsetOutOfRangeError(
                            f"{meta.name}-{p}: offsets {start}..{offsets.log_start_offset - 1} were deleted "
                            "(retention or delete-records); set failOnDataLoss=false to start at the log start instead"
                        )
                    start = offsets.log_start_offset
                if start > offsets.high_watermark:
                    raise OffsetOutOfRangeError(
                        f"{meta.name}-{p}: start offset {start} is past the high watermark {offsets.high_watermark}"
                    )
                wanted_end = end_spec.get(meta.name, p)
                if wanted_end == LATEST:
                    end = max(readable_end, start)
                    latest_ends.add((meta.name, p))
                else:
                    end = wanted_end
                    if end > readable_end:
                        raise OffsetOutOfRangeError(
                            f"{meta.name}-{p}: endingOffsets {end} is past what {isolation_level} can read "
                            f"({readable_end})"
                        )
                    if end < start:
                        raise OffsetOutOfRangeError(
                            f"{meta.name}-{p}: endingOffsets {end} is before the start offset {start}"
                        )
                ranges.append(OffsetRange(meta.name, p, start, end))
        if isolation_level == READ_COMMITTED and latest_ends:
            ranges = _atomic_ends(tx, metas, ranges, latest_ends)
        return OffsetRanges(tuple(ranges), isolation_level, group_id)

    return broker._db.read(work)


def _atomic_ends(tx: Tx, metas: list[TopicMeta], ranges: list[OffsetRange],
                 movable: set[tuple[str, int]]) -> list[OffsetRange]:
    """Lower ``latest`` ends so that no committed transaction is cut by the read's end
    (:func:`txn_broker.log.cut.atomic_ends`)."""
    ids = {m.name: m.topic_id for m in metas}
    ends = atomic_ends(tx, {(ids[r.topic], r.partition): (r.start, r.end) for r in ranges},
                       {(ids[topic], partition) for topic, partition in movable})
    return [OffsetRange(r.topic, r.partition, r.start, ends[(ids[r.topic], r.partition)]) for r in ranges]


def planned_offsets(df: Any) -> OffsetRanges | None:
    """The offsets a ``spark.read.format("txn_topic")...load()`` DataFrame reads, fixed when
    it was loaded (None if ``df`` has no ``_offset`` column from a txn_topic read). Pass
    ``.ending()`` to ``producer.send_offsets_to_transaction`` to commit what was read."""
    try:
        metadata = df.schema["_offset"].metadata
    except (KeyError, LookupError):
        return None
    text = metadata.get(METADATA_KEY) if metadata else None
    return OffsetRanges.from_json(text) if text else None

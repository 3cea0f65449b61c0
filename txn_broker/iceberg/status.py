"""How far behind a topic's Iceberg table is: per partition, the offset the table holds
against the partition's last stable offset, and the age of the oldest committed record
not published yet (by the database's clock)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..database import Database, Tx
from ..log.partition import READ_COMMITTED, partition_offsets, plan_segments
from .publisher import published_offsets

if TYPE_CHECKING:
    from ..topics import TopicMeta
    from .publisher import Publisher


@dataclass(frozen=True)
class PartitionStatus:
    partition: int
    #: the next offset the table holds (0: nothing published)
    published_offset: int
    last_stable_offset: int
    log_start_offset: int
    #: committed offsets not in the table yet (aborted ones count: they occupy offsets)
    offsets_behind: int
    #: seconds since the oldest unpublished committed record was written (0: up to date)
    seconds_behind: float


@dataclass(frozen=True)
class TableStatus:
    topic: str
    table: str
    snapshot_id: int | None
    snapshot_ms: int | None
    partitions: list[PartitionStatus]

    @property
    def seconds_behind(self) -> float:
        return max((p.seconds_behind for p in self.partitions), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds_behind": self.seconds_behind}


def table_status(db: Database, publisher: Publisher, meta: TopicMeta) -> TableStatus:
    table = publisher.table(meta)
    published = published_offsets(table)
    snapshot = table.current_snapshot()

    def work(tx: Tx) -> list[PartitionStatus]:
        now = int(tx.scalar("now_ms"))
        out = []
        for p in range(meta.partition_count):
            offsets = partition_offsets(tx, meta.topic_id, p)
            if offsets is None:
                continue
            at = max(published.get(p, 0), offsets.log_start_offset)
            behind = 0.0
            if at < offsets.last_stable_offset:
                waiting = [s for s in plan_segments(tx, meta.topic_id, p, at, offsets.last_stable_offset, 16)
                           if not s.skipped_at(READ_COMMITTED)]
                stamp = tx.one("segment_written_ms", topic_id=meta.topic_id, partition_no=p,
                               base_offset=waiting[0].base_offset) if waiting else None
                if stamp is not None:
                    behind = max(now - int(stamp.created_ms), 0) / 1000
            out.append(PartitionStatus(p, published.get(p, 0), offsets.last_stable_offset, offsets.log_start_offset,
                                       max(offsets.last_stable_offset - at, 0), behind))
        return out

    return TableStatus(meta.name, f"{publisher.settings.namespace}.{meta.name}",
                       snapshot.snapshot_id if snapshot else None, snapshot.timestamp_ms if snapshot else None,
                       db.read(work))

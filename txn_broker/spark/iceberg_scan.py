"""Planning the part of a read that a topic's Iceberg table already holds (driver side,
no Spark here): for each partition read, the offsets ``[start, cut)`` below what the
table's current snapshot publishes are read from its Parquet data files, the rest
``[cut, end)`` (the unpublished tail, up to the read's end) through the ``txn_topic``
source.

Why this reads exactly what the source reads: a snapshot holds, for each partition, every
committed record of the offsets below its ``txn-broker.offsets`` from the log start on
(aborted records never; :mod:`txn_broker.iceberg.publisher`), and a read_committed read
returns the committed records of its range. So the table's rows with ``start <= _offset <
cut`` are the source's rows of that range. Retention only removes from the table files
whose records all lie below the log start, which a read never starts below.

The table is used only when it can be read as the source reads: read_committed, a table
with a snapshot, and one schema, equal to the one the topic is read in (a table whose
schema evolved holds files in older schemas, which the source projects by its own rules
(defaults of added columns among them) and Spark's Parquet reader would not; such a read
goes through the source). The table must also still be the publisher's alone: if another
engine wrote to it (a retained snapshot whose summary lacks ``txn-broker.topic-id``, such as
pyiceberg's or Spark's delete, overwrite or append, or delete files in the current snapshot),
its files no longer hold exactly the topic's records, and the read goes through the source.
Anything else, or a catalog that does not answer, plans the whole read through the source.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import TxnBrokerError
from ..iceberg.schema import table_schema
from ..log.field_ids import METADATA_FIELD_IDS
from ..log.partition import READ_COMMITTED
from .offsets import OffsetRange, OffsetRanges

if TYPE_CHECKING:
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table

    from ..broker import Broker
    from ..topics import TopicMeta

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableScan:
    """One topic's part read from its table: the data files (as the table names them)
    holding offsets of ``ranges``, the table's Arrow schema (field ids on every field),
    and the snapshot they come from. ``whole``: every file's rows lie inside its
    partition's range (by the file's ``_offset`` bounds), so no row needs filtering out."""

    topic: str
    table: str
    snapshot_id: int
    location: str
    schema: pa.Schema
    ranges: tuple[OffsetRange, ...]
    files: tuple[str, ...]
    whole: bool = False

    @property
    def offsets(self) -> int:
        return sum(r.size for r in self.ranges)


@dataclass
class ReadSplit:
    """A read cut in two: ``tables`` (one per topic read from its table) and ``tail``
    (every partition's remaining range, for the source; empty ranges included, so the
    source reads exactly these partitions). ``skipped``: why a topic was not read from
    its table (None where it was, or where it has no table)."""

    tables: list[TableScan]
    tail: OffsetRanges
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def tail_offsets(self) -> int:
        return sum(r.size for r in self.tail)


def split_read(broker: Broker, ranges: OffsetRanges, read_versions: dict[str, int] | None = None) -> ReadSplit:
    """Cut ``ranges`` into what the topics' tables hold and the tail (module docstring).
    Never raises for the table's sake: a catalog or table problem leaves that topic to the
    source and says why in ``skipped``."""
    if ranges.isolation_level != READ_COMMITTED:
        return ReadSplit([], ranges)
    tables: list[TableScan] = []
    tail: list[OffsetRange] = []
    skipped: dict[str, str] = {}
    for topic in ranges.topics:
        mine = [r for r in ranges if r.topic == topic]
        meta = broker._topics.get(topic)
        scan: TableScan | None = None
        if meta.config.get("iceberg.enabled") and any(r.size for r in mine):
            version = (read_versions or {}).get(topic, meta.schema_version)
            try:
                scan = _table_scan(broker, meta, mine, version)
            except TxnBrokerError as error:
                skipped[topic] = f"its Iceberg table could not be read ({type(error).__name__}: {error})"
            except _NotReadable as why:
                skipped[topic] = str(why)
        if scan is None:
            tail += mine
            continue
        cuts = {r.partition: r.end for r in scan.ranges}
        tail += [OffsetRange(r.topic, r.partition, cuts.get(r.partition, r.start), r.end) for r in mine]
        if scan.files:
            tables.append(scan)
    return ReadSplit(tables, OffsetRanges(tuple(tail), ranges.isolation_level, ranges.group_id), skipped)


class _NotReadable(Exception):
    """The table cannot stand in for the source in this read (the message says why)."""


def _table_scan(broker: Broker, meta: TopicMeta, ranges: list[OffsetRange], version: int) -> TableScan | None:
    from ..iceberg.publisher import published_offsets
    from ..iceberg.small_files import current_manifests, partition_files

    table: Table = broker.iceberg_table(meta.name)
    snapshot = table.current_snapshot()
    if snapshot is None:
        return None
    schema = table_schema(meta.schema_at(version))
    _check_schema(table, schema)
    manifests = current_manifests(table)
    _check_writers(table, manifests)
    published = published_offsets(table)
    by_partition = partition_files(table, manifests)  # the current snapshot's files, offset order
    native: list[OffsetRange] = []
    files: list[str] = []
    whole = True
    for r in ranges:
        cut = min(max(published.get(r.partition, 0), r.start), r.end)
        if cut <= r.start:
            continue
        native.append(OffsetRange(r.topic, r.partition, r.start, cut))
        for f in by_partition.get(r.partition, []):
            bounds = _offset_bounds(f)
            if bounds is None or (bounds[0] < cut and bounds[1] >= r.start):
                files.append(f.file_path)
                whole = whole and bounds is not None and r.start <= bounds[0] and bounds[1] < cut
    if not native:
        return None
    return TableScan(meta.name, ".".join(table.name()), snapshot.snapshot_id, table.location(), schema,
                     tuple(native), tuple(files), whole)


def _check_schema(table: Table, schema: pa.Schema) -> None:
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    if len(table.schemas()) != 1:
        raise _NotReadable("its Iceberg table's schema evolved (files in older schemas are read through the "
                           "source, which projects them by the topic's rules)")
    if pyarrow_to_schema(schema).as_struct() != table.schema().as_struct():
        raise _NotReadable("its Iceberg table's schema is not the one the topic is read in")


def _check_writers(table: Table, manifests: list[ManifestFile]) -> None:
    """_NotReadable unless every retained snapshot from the current one back was written by
    the publisher (its summary names the topic id) and the current one (whose ``manifests``
    are given) has no delete files."""
    from ..iceberg.catalog import TOPIC_ID_PROPERTY
    from ..iceberg.small_files import has_delete_files

    by_id = {s.snapshot_id: s for s in table.snapshots()}  # hundreds at one publish every 2 s
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        if summary is None or TOPIC_ID_PROPERTY not in summary.additional_properties:
            operation = summary.operation.value if summary is not None else "unknown"
            raise _NotReadable(f"its Iceberg table has a snapshot the publisher did not write (snapshot "
                               f"{snapshot.snapshot_id}, operation {operation}): another writer changed the table, "
                               "so its files no longer stand for the topic")
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None
    if has_delete_files(manifests):
        raise _NotReadable("its Iceberg table has delete files, which the publisher never writes: another writer "
                           "deleted rows, so its files no longer stand for the topic")


def _offset_bounds(data_file: object) -> tuple[int, int] | None:
    """A data file's lowest and highest ``_offset`` (its column bounds), or None for a
    file without them (it is read, and the filter on ``_offset`` applies)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import LongType

    offset_id = METADATA_FIELD_IDS["_offset"]
    lower = (getattr(data_file, "lower_bounds", None) or {}).get(offset_id)
    upper = (getattr(data_file, "upper_bounds", None) or {}).get(offset_id)
    if lower is None or upper is None:
        return None
    return int(from_bytes(LongType(), lower)), int(from_bytes(LongType(), upper))

"""fsck's check of each topic's Iceberg table against the topic (imports pyiceberg).

Problems (stable kinds): ``iceberg_offsets_ahead`` (the table says it holds offsets beyond
what the partition has committed), ``iceberg_rows_beyond_offsets`` (a data file holds
offsets at or past what the snapshot's summary says it holds), ``iceberg_offset_overlap``
(two data files of a partition hold the same offsets: a record twice), ``iceberg_missing_file``
(a data file of the current snapshot is not in storage). A table not made yet (nothing
published) is fine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..database import Database
from ..log.partition import partition_offsets
from .publisher import published_offsets

if TYPE_CHECKING:
    from ..topics import TopicMeta
    from .publisher import Publisher

PROBLEM_KINDS = ("iceberg_offsets_ahead", "iceberg_rows_beyond_offsets", "iceberg_offset_overlap",
                 "iceberg_missing_file")


def check_table(db: Database, publisher: Publisher, meta: TopicMeta) -> Iterator[tuple[str, int | None, str]]:
    """``(kind, partition, message)`` for each problem of ``meta``'s table."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.types import LongType

    name = f"{publisher.settings.namespace}.{meta.name}"
    try:
        table = publisher.catalog.load_table((publisher.settings.namespace, meta.name))
    except NoSuchTableError:
        return
    published = published_offsets(table)
    ends = db.read(lambda tx: {p: partition_offsets(tx, meta.topic_id, p) for p in range(meta.partition_count)})
    for p, offset in sorted(published.items()):
        end = ends.get(p)
        if end is None or offset > end.last_stable_offset:
            yield ("iceberg_offsets_ahead", p, f"{name}: partition {p} is published up to offset {offset}, "
                   f"past its last stable offset {end.last_stable_offset if end else 'none (no such partition)'}")
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for task in table.scan().plan_files():
        f = task.file
        p = int(f.partition[0])
        lower, upper = (f.lower_bounds or {}).get(3), (f.upper_bounds or {}).get(3)
        if lower is not None and upper is not None:
            first, last = int(from_bytes(LongType(), lower)), int(from_bytes(LongType(), upper))
            spans.setdefault(p, []).append((first, last, f.file_path))
            if last >= published.get(p, 0):
                yield ("iceberg_rows_beyond_offsets", p, f"{name}: {f.file_path} holds offset {last} of partition "
                       f"{p}, which the snapshot's offsets ({published.get(p, 0)}) do not cover")
        if not table.io.new_input(f.file_path).exists():
            yield ("iceberg_missing_file", p, f"{name}: data file {f.file_path} is missing from storage")
    for p, files in spans.items():
        files.sort()
        for (_a, last, path), (first, _b, other) in zip(files, files[1:], strict=False):
            if first <= last:
                yield ("iceberg_offset_overlap", p, f"{name}: {path} and {other} both hold offsets from {first}")

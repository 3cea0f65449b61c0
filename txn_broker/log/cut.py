"""A consistent cut: per-partition ends of a read such that every committed transaction is
either wholly inside the read or wholly outside it, in every partition it wrote.

The last stable offset of each partition, read in one database snapshot, is not enough on
its own: an open transaction holds its partition's end back, so a transaction that
committed later, with records above that end there and below the end of another
partition, would be cut in two. Such a transaction's records are moved out of the read in
every partition (the end lowered to its first offset there), which may in turn cut
another transaction; this repeats until nothing moves. Ends only go down, so it stops.

Used by the Spark data source (the atomic end of a bounded read) and the Iceberg
publisher (each table snapshot holds whole transactions).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..database import Tx

#: (topic id, partition)
Place = tuple[int, int]


def atomic_ends(tx: Tx, ranges: Mapping[Place, tuple[int, int]], movable: set[Place] | None = None
                ) -> dict[Place, int]:
    """The ends of ``ranges`` (``{(topic_id, partition): (start, end)}``) lowered, within
    the snapshot of ``tx``, so that no committed transaction is cut by them. Only the ends
    of ``movable`` places are lowered (default: all); a transaction that begun before a
    range's start is left as it is (its first records were read already)."""
    ends = {place: end for place, (_start, end) in ranges.items()}
    may_move = set(ranges) if movable is None else movable
    todo = set(ranges)
    while todo:
        topic_id, partition = todo.pop()
        rows = tx.all("committed_txns_beyond", topic_id=topic_id, partition_no=partition,
                      end_offset=ends[(topic_id, partition)])
        for row in rows:
            other = (row.topic_id, row.partition_no)
            if other not in ranges or other not in may_move:
                continue  # not read here, or its end is fixed by the caller
            start = ranges[other][0]
            if row.first_offset >= ends[other] or row.first_offset < start:
                continue  # already outside the read, or begun before it (no fix)
            ends[other] = row.first_offset
            todo.add(other)
    return ends

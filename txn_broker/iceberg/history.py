"""Expiring a topic table's old snapshots (imports pyiceberg).

The topic configs ``iceberg.snapshot.max.age.ms`` (default 15 minutes) and
``iceberg.snapshot.min.keep`` (default 1) are Iceberg's
``history.expire.max-snapshot-age-ms`` and ``history.expire.min-snapshots-to-keep``: a
snapshot older than the maximum age is removed from the table's metadata, except the
newest ``min.keep`` snapshots of the table's history (its current snapshot and its
ancestors) and the newest one that records the published offsets (the current snapshot,
unless another engine committed after the publisher). The files only expired snapshots
referenced are then orphans of the warehouse, which gc deletes once they are older than
its grace period (:mod:`.warehouse`), so a reader that planned an expired snapshot just
before can still read it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .catalog import catalog_call

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from ..topics import TopicMeta

log = logging.getLogger(__name__)


def expirable_snapshots(table: Table, max_age_ms: int, min_keep: int, now_ms: int, offsets_key: str) -> list[int]:
    """The ids of the snapshots to expire (module docstring)."""
    metadata = table.metadata
    current = table.current_snapshot()
    if current is None:
        return []
    kept: set[int] = set()
    snapshot: Snapshot | None = current
    offsets_kept = False
    while snapshot is not None and (len(kept) < min_keep or not offsets_kept):
        kept.add(snapshot.snapshot_id)
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        offsets_kept = offsets_kept or offsets_key in summary
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    kept |= {ref.snapshot_id for ref in metadata.refs.values()}  # branch heads and tags
    return [s.snapshot_id for s in metadata.snapshots
            if s.snapshot_id not in kept and s.timestamp_ms < now_ms - max_age_ms]


def expire_snapshots(table: Table, meta: TopicMeta, offsets_key: str) -> int:
    """Expire the table's snapshots past the topic's ``iceberg.snapshot.*`` configs in one
    commit; returns how many (0 also when another writer committed meanwhile: the next
    publish tries again)."""
    from pyiceberg.exceptions import CommitFailedException

    expired = expirable_snapshots(table, int(meta.config["iceberg.snapshot.max.age.ms"]),
                                  int(meta.config["iceberg.snapshot.min.keep"]), int(time.time() * 1000),
                                  offsets_key)
    if not expired:
        return 0

    def commit() -> bool:
        try:
            table.maintenance.expire_snapshots().by_ids(expired).commit()
        except CommitFailedException:
            return False
        return True

    if not catalog_call(commit, f"expire snapshots of {'.'.join(table.name())}"):
        return 0
    log.info("%s: %d snapshots expired", ".".join(table.name()), len(expired))
    return len(expired)

"""Finding objects in storage that no metadata references ("orphans").

Segment objects live under ``topics/<topic_id>/<partition>/``. An object there is an
orphan when no segment row references its key and it is not queued in
``object_deletions``. Orphans are normal for a while: a producer uploads a segment
before it registers it, and a Spark job's executors upload objects that its driver
registers only when the job ends. They are left behind for good by a writer that crashed
between upload and registration (or midway through writing an object into a local
directory: its temporary file, in the partition's directory, is an orphan too), or when
deleting a topic's objects failed. ``gc`` deletes them once they are older than a grace
period; ``fsck`` reports them as warnings.

Only keys under ``topics/`` are considered: the broker never owns anything else in the
bucket or directory, so nothing else is ever deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .config import DAY_MS, Settings
from .database import Database, Tx
from .log.keys import SEGMENT_PREFIX, parse_segment_key
from .storage import ObjectStore

_PAGE = 5000


@dataclass(frozen=True)
class Orphan:
    """An object under ``topics/`` that no segment row or deletion request references."""

    key: str
    size: int
    modified_ms: int
    #: how old the object is, by the database's clock
    age_ms: int


def default_grace_ms(settings: Settings) -> int:
    """The default orphan grace: a day, or the longest a transaction may stay open if
    that is longer (a writer registers its uploads before its transaction ends)."""
    return max(DAY_MS, settings.max_transaction_timeout_ms)


def referenced_keys(db: Database, topic_id: int, partition: int) -> set[str]:
    """The object keys a partition's segment rows reference, read in pages."""
    keys: set[str] = set()
    after = -1
    while True:

        def page(tx: Tx, after: int = after) -> list[Any]:
            return tx.all("partition_object_keys", topic_id=topic_id, partition_no=partition,
                          after_offset=after, limit=_PAGE)

        rows = db.read(page)
        keys.update(r.object_key for r in rows)
        if len(rows) < _PAGE:
            return keys
        after = rows[-1].base_offset


def is_known(db: Database, key: str) -> bool:
    """Whether a segment row or a queued deletion references ``key`` right now."""
    return db.read(lambda tx: tx.one("object_key_known", object_key=key)) is not None


def db_now_ms(db: Database) -> int:
    def work(tx: Tx) -> int:
        return int(tx.scalar("now_ms"))

    return db.read(work)


def find_orphans(db: Database, store: ObjectStore, now_ms: int | None = None) -> Iterator[Orphan]:
    """Every orphan under ``topics/``, streamed from the store's listing.

    The listing is compared with each partition's referenced keys (loaded once per run of
    consecutive keys of a partition, which is how both stores list); a key not among them
    is confirmed with a direct lookup, so an object registered after its partition's keys
    were loaded is never reported."""
    now = db_now_ms(db) if now_ms is None else now_ms
    current: tuple[int, int] | None = None
    known: set[str] = set()
    for info in store.list(SEGMENT_PREFIX):
        partition = parse_segment_key(info.key)
        if partition != current:
            current = partition
            known = referenced_keys(db, *partition) if partition is not None else set()
        if info.key in known or is_known(db, info.key):
            continue
        yield Orphan(info.key, info.size, info.modified_ms, now - info.modified_ms)

"""Topics: creation with a schema and configs, lookup (cached), description, alteration
(schema versions, more partitions, configs) and deletion."""

from __future__ import annotations

import getpass
import json
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from .config import Settings
from .database import Database, Tx
from .errors import (
    InvalidConfigError,
    InvalidInputError,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from .log.batches import DEFAULT_SCHEMA, schema_from_text, schema_to_text, validate_topic_schema
from .log.field_ids import field_id, strip_field_ids
from .log.projection import Projection, declared_default, same_schema
from .models import PartitionInfo, TopicDescription
from .names import validate_topic_name
from .topic_configs import check_changes, segment_codec, validate_config, with_legacy_defaults
from .topic_schemas import (
    SchemaVersion,
    check_change,
    evolve_ids,
    last_field_id,
    new_topic_schema,
    with_ids,
)

MAX_PARTITIONS = 10_000
#: a topic looked up longer ago than this is looked up again on its next use (one small
#: query), so that writers and readers in every process see an alteration made elsewhere
#: (a new schema version, more partitions, changed configs) within this time
METADATA_MAX_AGE_S = 5.0


@dataclass(frozen=True)
class TopicMeta:
    topic_id: int
    name: str
    partition_count: int
    #: the latest schema, with field ids (readers' tables carry none: :attr:`reader_schema`)
    schema: pa.Schema
    config: dict[str, Any]
    created_ms: int
    #: the latest schema's version number
    schema_version: int = 1
    #: the last field id given (a new field takes the next)
    last_field_id: int = 0
    #: every version of the schema, by number (the latest included)
    versions: Mapping[int, SchemaVersion] = field(default_factory=dict)

    @property
    def max_message_bytes(self) -> int:
        return int(self.config["max.message.bytes"])

    @property
    def compression(self) -> str:
        """How new segments of this topic are compressed: the Arrow IPC codec of its
        ``compression.type`` (Kafka's gzip, snappy and producer mapped to one)."""
        return segment_codec(str(self.config["compression.type"]))

    @property
    def compatibility(self) -> str:
        """``schema.compatibility``: the rules schema changes and writers' versions follow."""
        return str(self.config["schema.compatibility"])

    @cached_property
    def reader_schema(self) -> pa.Schema:
        """The latest schema without field ids: the topic's columns of readers' tables."""
        return strip_field_ids(self.schema)

    def schema_at(self, version: int) -> pa.Schema:
        """The schema (with ids) of ``version``, which a segment was encoded in."""
        try:
            return self.versions[version].schema
        except KeyError:
            raise UnknownTopicOrPartitionError(
                f"topic {self.name!r} has no schema version {version} (its latest is {self.schema_version}); "
                "it was altered since this handle was made: look the topic up again") from None

    @cached_property
    def _projections(self) -> dict[int, Projection]:
        return {}

    def projection_from(self, version: int) -> Projection:
        """The reading of data of ``version`` under the latest schema, as readers' tables
        (field ids off), planned once per version and kept with this handle."""
        plan = self._projections.get(version)
        if plan is None:
            plan = self._projections[version] = Projection(self.schema_at(version), self.schema, keep_ids=False)
        return plan

    @classmethod
    def of(cls, row: Any, versions: Mapping[int, SchemaVersion] | None = None) -> TopicMeta:
        config = with_legacy_defaults(json.loads(row.config))  # keys added since it was created
        schema = with_ids(schema_from_text(row.arrow_schema))
        version = int(getattr(row, "schema_version", 1))
        known = dict(versions or {})
        known.setdefault(version, SchemaVersion(version, schema, row.created_ms, ""))
        return cls(row.topic_id, row.name, row.partition_count, schema, config, row.created_ms, version,
                   last_field_id(int(getattr(row, "last_field_id", 0)), schema), known)


def load_versions(tx: Tx, topic_id: int) -> dict[int, SchemaVersion]:
    """Every schema version of a topic, with ids."""
    return {r.version: SchemaVersion(r.version, with_ids(schema_from_text(r.arrow_schema)), r.created_ms,
                                     r.created_by)
            for r in tx.all("topic_schema_versions", topic_id=topic_id)}


def default_actor() -> str:
    """Who an alteration is recorded as when the caller names nobody: ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class Topics:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._cache: dict[str, TopicMeta] = {}
        self._fetched: dict[str, float] = {}
        self._lock = threading.Lock()

    def _remember(self, meta: TopicMeta) -> None:
        with self._lock:
            self._cache[meta.name] = meta
            self._fetched[meta.name] = time.monotonic()

    def create(self, name: str, partitions: int = 1, schema: pa.Schema | None = None,
               config: dict[str, Any] | None = None, *, by: str | None = None) -> TopicMeta:
        validate_topic_name(name)
        _check_partitions(partitions)
        schema, last_id = new_topic_schema(DEFAULT_SCHEMA if schema is None else schema)
        conf = validate_config(config, self.settings)
        actor = _actor(by)
        if conf.get("iceberg.enabled"):
            from .iceberg.schema import check_representable

            check_representable(schema)  # IcebergSchemaError before anything is written

        def work(tx: Tx) -> TopicMeta:
            topic_id = int(tx.scalar("next_id", name="topic_id"))
            text = schema_to_text(schema)
            created = tx.one("insert_topic", topic_id=topic_id, name=name, partition_count=partitions,
                             arrow_schema=text, config=json.dumps(conf, sort_keys=True), last_field_id=last_id)
            if created is None:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            tx.execute_many("insert_partition",
                            [{"topic_id": topic_id, "partition_no": p} for p in range(partitions)])
            tx.execute("insert_topic_schema", topic_id=topic_id, version=1, arrow_schema=text, created_by=actor)
            row = tx.one("get_topic_by_id", topic_id=topic_id)
            return TopicMeta.of(row, load_versions(tx, topic_id))

        meta = self.db.run(work)
        self._remember(meta)
        return meta

    def get(self, name: str, *, refresh: bool = False) -> TopicMeta:
        """The topic's metadata (looked up again when ``refresh``, or when the copy held is
        older than :data:`METADATA_MAX_AGE_S`); UnknownTopicOrPartitionError if there is none."""
        validate_topic_name(name)  # before the cache: a list is no name, and no key either
        if not refresh:
            cached = self._cache.get(name)
            if cached is not None and time.monotonic() - self._fetched.get(name, 0.0) < METADATA_MAX_AGE_S:
                return cached
        known = self._cache.get(name)

        def work(tx: Tx) -> TopicMeta | None:
            row = tx.one("get_topic", name=name)
            if row is None:
                return None
            if known is not None and known.topic_id == row.topic_id and known.schema_version == row.schema_version:
                versions = dict(known.versions)  # versions never change: only new ones come
            else:
                versions = load_versions(tx, row.topic_id)
            return TopicMeta.of(row, versions)

        meta = self.db.run(work, write=False)
        if meta is None:
            with self._lock:
                self._cache.pop(name, None)
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        self._remember(meta)
        return meta

    def alter(self, name: str, *, schema: pa.Schema | None = None, partitions: int | None = None,
              config: Mapping[str, Any] | None = None, by: str | None = None) -> dict[str, Any]:
        """Change a topic's schema (a new version, under its rules), grow its partitions
        and change configs: all in one database transaction, recorded with ``by`` (default
        ``user@host``) and the time. Returns what changed (empty: nothing did). Typed errors
        (IncompatibleSchemaError, InvalidPartitionsError, InvalidConfigError, ...) change
        nothing."""
        validate_topic_name(name)
        if partitions is not None:
            _check_partitions(partitions)
        changed_config = check_changes(config)
        proposed = None if schema is None else validate_topic_schema(schema)
        actor = _actor(by)

        def work(tx: Tx) -> dict[str, Any]:
            row = tx.one("lock_topic", name=name)
            if row is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            current = TopicMeta.of(row, load_versions(tx, row.topic_id))
            changes: dict[str, Any] = {}
            new_config = {**current.config, **changed_config}
            config_diff = {k: {"from": current.config.get(k), "to": v} for k, v in changed_config.items()
                           if current.config.get(k) != v}
            if config_diff:
                tx.execute("set_topic_config", topic_id=current.topic_id, config=json.dumps(new_config, sort_keys=True))
                changes["config"] = config_diff
            if partitions is not None and partitions != current.partition_count:
                if partitions < current.partition_count:
                    raise InvalidPartitionsError(
                        f"topic {name!r} has {current.partition_count} partitions; partitions can only be "
                        f"added, not removed (asked for {partitions})")
                tx.execute("set_partition_count", topic_id=current.topic_id, partition_count=partitions)
                tx.execute_many("insert_partition", [{"topic_id": current.topic_id, "partition_no": p}
                                                     for p in range(current.partition_count, partitions)])
                changes["partitions"] = {"from": current.partition_count, "to": partitions}
            if proposed is not None:
                evolved, last_id = evolve_ids(current.schema, current.last_field_id, proposed)
                if not _same_version(evolved, current.schema):
                    versions = [current.versions[v] for v in sorted(current.versions)]
                    check_change(versions, evolved, str(new_config["schema.compatibility"]))
                    version = current.schema_version + 1
                    text = schema_to_text(evolved)
                    tx.execute("insert_topic_schema", topic_id=current.topic_id, version=version,
                               arrow_schema=text, created_by=actor)
                    tx.execute("set_topic_schema", topic_id=current.topic_id, arrow_schema=text,
                               schema_version=version, last_field_id=last_id)
                    changes["schema"] = {"from": current.schema_version, "to": version,
                                         "changes": describe_change(current.schema, evolved)}
            if new_config.get("iceberg.enabled") and ("schema" in changes or "config" in changes):
                from .iceberg.schema import check_representable

                check_representable(evolved if "schema" in changes else current.schema)  # nothing written
            if changes:
                tx.one("insert_topic_alteration", topic_id=current.topic_id, altered_by=actor,
                       changes=json.dumps(changes, sort_keys=True))
            return changes

        changes = self.db.run(work)
        self.get(name, refresh=True)
        return changes

    def alterations(self, name: str) -> list[dict[str, Any]]:
        """A topic's alterations, oldest first: seq, altered_ms, altered_by, changes."""
        meta = self.get(name, refresh=True)
        rows = self.db.read(lambda tx: tx.all("topic_alterations_of", topic_id=meta.topic_id))
        return [{"seq": r.seq, "altered_ms": r.altered_ms, "altered_by": r.altered_by,
                 "changes": json.loads(r.changes)} for r in rows]

    def forget(self, name: str) -> None:
        with self._lock:
            self._cache.pop(name, None)

    def names(self) -> list[str]:
        return [r.name for r in self.db.run(lambda tx: tx.all("list_topics"), write=False)]

    def describe(self, name: str) -> TopicDescription:
        meta = self.get(name, refresh=True)
        rows = self.db.read(lambda tx: tx.all("topic_partition_offsets", topic_id=meta.topic_id))
        return TopicDescription(
            name=meta.name,
            partitions=[PartitionInfo(r.partition_no, r.log_start_offset, r.high_watermark,
                                      max(r.last_stable_offset, r.log_start_offset), r.segment_count,
                                      r.size_bytes) for r in rows],
            schema=meta.schema, config=dict(meta.config), topic_id=meta.topic_id,
            created_ms=meta.created_ms, schema_version=meta.schema_version,
            schema_versions=[meta.versions[v] for v in sorted(meta.versions)],
        )

    def delete(self, name: str) -> list[str]:
        """Drop the topic's metadata in one transaction; returns its object keys, which the
        caller deletes (what it fails to delete is left for gc as orphans)."""
        meta = self.get(name, refresh=True)

        def work(tx: Tx) -> list[str]:
            keys = [r.object_key for r in tx.all("topic_object_keys", topic_id=meta.topic_id)]
            tx.execute("delete_topic", topic_id=meta.topic_id)
            return keys

        keys = self.db.run(work)
        self.forget(name)
        return keys


def _check_partitions(partitions: object) -> None:
    if not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidConfigError(f"partitions must be an int in 1..{MAX_PARTITIONS}, got {partitions!r}")


def _actor(by: str | None) -> str:
    if by is None:
        return default_actor()
    if not isinstance(by, str) or not by.strip() or len(by) > 200:
        raise InvalidInputError(f"by must be a non-empty name of at most 200 characters, got {by!r}")
    return by


def _same_version(a: pa.Schema, b: pa.Schema) -> bool:
    """Whether two schemas with ids are the same version: same fields, ids, nullability
    (required -> optional is a change) and defaults."""
    return same_schema(a, b) and all(declared_default(x) == declared_default(y) and x.nullable == y.nullable
                                     for x, y in zip(a, b, strict=True))


def describe_change(old: pa.Schema, new: pa.Schema) -> list[str]:
    """What a schema change does to the top-level fields, one line each (by field id)."""
    old_by_id = {field_id(f): f for f in old}
    new_ids = {field_id(f) for f in new}
    lines = []
    for f in new:
        was = old_by_id.get(field_id(f))
        if was is None:
            lines.append(f"added {f.name} {f.type}{'' if f.nullable else ' not null'} (id {field_id(f)})")
            continue
        if was.name != f.name:
            lines.append(f"renamed {was.name} to {f.name} (id {field_id(f)})")
        if not was.type.equals(f.type):
            lines.append(f"changed {f.name} from {was.type} to {f.type}")
        if not was.nullable and f.nullable:
            lines.append(f"made {f.name} nullable")
        if declared_default(was) != declared_default(f):
            lines.append(f"set the default of {f.name} to {json.dumps(declared_default(f)[1])}")
    lines += [f"dropped {f.name} (id {field_id(f)})" for f in old if field_id(f) not in new_ids]
    if not lines and [field_id(f) for f in old] != [field_id(f) for f in new]:
        lines.append("reordered the fields")
    return lines

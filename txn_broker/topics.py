"""Topics: creation with a schema and configs, lookup (cached), description, deletion."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .config import Settings
from .database import Database, Tx
from .errors import InvalidConfigError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from .log.batches import DEFAULT_SCHEMA, schema_from_text, schema_to_text, validate_topic_schema
from .models import PartitionInfo, TopicDescription
from .names import validate_topic_name
from .topic_configs import validate_config, with_legacy_defaults

MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class TopicMeta:
    topic_id: int
    name: str
    partition_count: int
    schema: pa.Schema
    config: dict[str, Any]
    created_ms: int

    @property
    def max_message_bytes(self) -> int:
        return int(self.config["max.message.bytes"])

    @property
    def compression(self) -> str:
        """How new segments of this topic are compressed (``compression.type``)."""
        return str(self.config["compression.type"])

    @classmethod
    def of(cls, row: Any) -> TopicMeta:
        config = with_legacy_defaults(json.loads(row.config))  # keys added since it was created
        return cls(row.topic_id, row.name, row.partition_count, schema_from_text(row.arrow_schema),
                   config, row.created_ms)


class Topics:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._cache: dict[str, TopicMeta] = {}
        self._lock = threading.Lock()

    def create(self, name: str, partitions: int = 1, schema: pa.Schema | None = None,
               config: dict[str, Any] | None = None) -> TopicMeta:
        validate_topic_name(name)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or not (
            1 <= partitions <= MAX_PARTITIONS
        ):
            raise InvalidConfigError(f"partitions must be an int in 1..{MAX_PARTITIONS}, got {partitions!r}")
        schema = DEFAULT_SCHEMA if schema is None else validate_topic_schema(schema)
        conf = validate_config(config, self.settings)
        if conf.get("iceberg.enabled"):
            from .iceberg.schema import check_representable

            check_representable(schema)  # IcebergSchemaError before anything is written

        def work(tx: Tx) -> TopicMeta:
            topic_id = int(tx.scalar("next_id", name="topic_id"))
            created = tx.one("insert_topic", topic_id=topic_id, name=name, partition_count=partitions,
                             arrow_schema=schema_to_text(schema), config=json.dumps(conf, sort_keys=True))
            if created is None:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            tx.execute_many("insert_partition",
                            [{"topic_id": topic_id, "partition_no": p} for p in range(partitions)])
            row = tx.one("get_topic_by_id", topic_id=topic_id)
            return TopicMeta.of(row)

        meta = self.db.run(work)
        with self._lock:
            self._cache[name] = meta
        return meta

    def get(self, name: str, *, refresh: bool = False) -> TopicMeta:
        """The topic's metadata; UnknownTopicOrPartitionError if there is none."""
        if not refresh:
            cached = self._cache.get(name)
            if cached is not None:
                return cached
        validate_topic_name(name)
        row = self.db.run(lambda tx: tx.one("get_topic", name=name), write=False)
        if row is None:
            with self._lock:
                self._cache.pop(name, None)
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        meta = TopicMeta.of(row)
        with self._lock:
            self._cache[name] = meta
        return meta

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
                                      r.last_stable_offset, r.segment_count, r.size_bytes) for r in rows],
            schema=meta.schema, config=dict(meta.config), topic_id=meta.topic_id,
            created_ms=meta.created_ms,
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

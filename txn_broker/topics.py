"""Topics: creation with a schema and configs, lookup (cached), description, deletion."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .config import Settings
from .database import Database, Tx
from .errors import InvalidConfigError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from .log.batches import DEFAULT_SCHEMA, schema_from_text, schema_to_text, validate_topic_schema
from .log.segment_format import COMPRESSION_TYPES
from .models import PartitionInfo, TopicDescription
from .names import validate_topic_name

MAX_PARTITIONS = 10_000
#: topic configs and their defaults (-1: unlimited; None: the broker's max_message_bytes)
TOPIC_CONFIGS: dict[str, int | str | None] = {
    "retention.ms": -1,
    "retention.bytes": -1,
    "max.message.bytes": None,
    "compression.type": "zstd",
}
#: the compression of segments written to a topic whose config predates compression.type
LEGACY_COMPRESSION = "uncompressed"


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
        config = json.loads(row.config)
        config.setdefault("compression.type", LEGACY_COMPRESSION)  # created before the config existed
        return cls(row.topic_id, row.name, row.partition_count, schema_from_text(row.arrow_schema),
                   config, row.created_ms)


def validate_config(config: object, settings: Settings) -> dict[str, Any]:
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise InvalidConfigError(f"topic config must be a dict, got {type(config).__name__}")
    unknown = sorted(set(map(str, config)) - set(TOPIC_CONFIGS))
    if unknown:
        raise InvalidConfigError(f"unknown topic config(s) {unknown}; known: {sorted(TOPIC_CONFIGS)}")
    out: dict[str, Any] = {}
    for key, default in TOPIC_CONFIGS.items():
        value = config.get(key, settings.max_message_bytes if default is None else default)
        if key == "compression.type":
            out[key] = _compression(value)
            continue
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,18}\s*", value):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidConfigError(f"topic config {key}={value!r} must be an integer")
        if key == "max.message.bytes" and value <= 0:
            raise InvalidConfigError(f"max.message.bytes must be positive, got {value}")
        if value < -1 or value == 0:
            raise InvalidConfigError(f"topic config {key} must be -1 (unlimited) or positive, got {value}")
        out[key] = value
    return out


def _compression(value: object) -> str:
    if value == "none":  # the producer-side spelling of Kafka's compression.type
        value = "uncompressed"
    if value not in COMPRESSION_TYPES:
        raise InvalidConfigError(
            f"topic config compression.type={value!r} must be one of {', '.join(COMPRESSION_TYPES)} "
            "(segments are Arrow IPC files, whose buffer compression is lz4 or zstd)"
        )
    return str(value)


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

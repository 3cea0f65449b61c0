"""Topic configs: every key a topic takes, its default, how its value is checked, and
when a change takes effect. One table (:data:`TOPIC_CONFIGS`), read by topic creation,
alteration, the CLI, the Kafka listener's CreateTopics and DescribeConfigs, and the docs;
and Kafka's topic configs that mean nothing here, accepted and ignored
(:data:`KAFKA_IGNORED_CONFIGS`).

A value arrives as whatever the caller had (an int from Python, a string from the CLI or
Kafka's protocol) and is stored normalised (ints as ints). A stored config lacking a key
added since the topic was created reads as that key's ``legacy`` value when it has one
(what the topic behaved like before the key existed), else its default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import Settings
from .errors import InvalidConfigError
from .log.segment_format import COMPRESSION_TYPES

#: a value as given (int, str, bool) and the broker's settings -> the stored value
Parser = Callable[[str, object], Any]


@dataclass(frozen=True)
class TopicConfig:
    """One topic config key."""

    name: str
    #: the default, or a function of the broker's settings giving it
    default: Any | Callable[[Settings], Any]
    #: checks and normalises a value (InvalidConfigError naming the key otherwise)
    parse: Parser
    #: what it does, for ``txn-broker topics describe`` help and the docs (one line)
    doc: str
    #: when a change takes effect: ``new writes``, ``next gc``, ``at once``
    takes_effect: str = "new writes"
    #: the value a topic created before this key existed behaves as (None: the default)
    legacy: Any = None

    def default_for(self, settings: Settings) -> Any:
        return self.default(settings) if callable(self.default) else self.default


# -- value parsers ------------------------------------------------------------------------

_INT = re.compile(r"\s*-?\d{1,18}\s*")


def as_int(key: str, value: object) -> int:
    if isinstance(value, str) and _INT.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidConfigError(f"topic config {key}={value!r} must be an integer")
    return value


def unlimited_or_positive(key: str, value: object) -> int:
    """-1 (unlimited) or a positive integer."""
    number = as_int(key, value)
    if number < -1 or number == 0:
        raise InvalidConfigError(f"topic config {key} must be -1 (unlimited) or positive, got {number}")
    return number


def positive(key: str, value: object) -> int:
    number = as_int(key, value)
    if number <= 0:
        raise InvalidConfigError(f"topic config {key} must be positive, got {number}")
    return number


def non_negative(key: str, value: object) -> int:
    number = as_int(key, value)
    if number < 0:
        raise InvalidConfigError(f"topic config {key} must be zero or positive, got {number}")
    return number


def as_bool(key: str, value: object) -> bool:
    """``true``/``false`` (any case) or a Python bool."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidConfigError(f"topic config {key}={value!r} must be true or false")


def one_of(*choices: str, aliases: Mapping[str, str] | None = None) -> Parser:
    """A parser accepting exactly ``choices`` (and ``aliases``, mapped to a choice)."""

    def parse(key: str, value: object) -> str:
        if isinstance(value, str) and aliases and value in aliases:
            value = aliases[value]
        if value not in choices:
            raise InvalidConfigError(f"topic config {key}={value!r} must be one of {', '.join(choices)}")
        return str(value)

    return parse


#: Kafka's compression.type values with no Arrow IPC counterpart, and the segment codec each
#: is stored with: gzip, which Kafka users pick for size, as zstd; snappy, picked for speed,
#: as lz4; producer (Kafka: keep the producer's codec), which cannot apply to segments that
#: are not the producer's batches, as the default zstd. The value is kept as given, so
#: DescribeConfigs answers what was set.
KAFKA_COMPRESSION_CODECS = {"gzip": "zstd", "snappy": "lz4", "producer": "zstd"}


def _compression(key: str, value: object) -> str:
    if value == "none":  # the producer-side spelling of Kafka's compression.type
        value = "uncompressed"
    if value not in COMPRESSION_TYPES and value not in KAFKA_COMPRESSION_CODECS:
        raise InvalidConfigError(
            f"topic config {key}={value!r} must be one of {', '.join(COMPRESSION_TYPES)} "
            "(segments are Arrow IPC files, whose buffer compression is lz4 or zstd), or one of Kafka's "
            f"{', '.join(KAFKA_COMPRESSION_CODECS)} (stored as "
            f"{', '.join(f'{k}: {v}' for k, v in KAFKA_COMPRESSION_CODECS.items())})"
        )
    return str(value)


def segment_codec(compression_type: str) -> str:
    """The Arrow IPC codec segments of a topic with this ``compression.type`` are written
    with (Kafka's gzip, snappy and producer mapped by :data:`KAFKA_COMPRESSION_CODECS`)."""
    return KAFKA_COMPRESSION_CODECS.get(compression_type, compression_type)


#: Schema Registry's compatibility types (txn_broker.topic_schemas)
COMPATIBILITY_MODES = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                       "FULL", "FULL_TRANSITIVE", "NONE")


def _compatibility(key: str, value: object) -> str:
    """One of Schema Registry's seven compatibility types, in any case."""
    if isinstance(value, str) and value.strip().upper() in COMPATIBILITY_MODES:
        return value.strip().upper()
    raise InvalidConfigError(f"topic config {key}={value!r} must be one of {', '.join(COMPATIBILITY_MODES)}")


# -- the table ----------------------------------------------------------------------------

TOPIC_CONFIGS: dict[str, TopicConfig] = {c.name: c for c in (
    TopicConfig("retention.ms", -1, unlimited_or_positive,
                "records older than this are deleted by gc, whole segments at a time (-1: kept)",
                takes_effect="next gc"),
    TopicConfig("retention.bytes", -1, unlimited_or_positive,
                "a partition is cut by gc to about this size, whole segments at a time (-1: unlimited)",
                takes_effect="next gc"),
    TopicConfig("max.message.bytes", lambda s: s.max_message_bytes, positive,
                "the largest record a send may hold, in bytes"),
    TopicConfig("compression.type", "zstd", _compression,
                "how new segments are compressed: uncompressed, lz4 or zstd; Kafka's gzip, snappy and producer "
                "are accepted and kept as given, and write zstd, lz4 and zstd segments",
                legacy="uncompressed"),
    TopicConfig("schema.compatibility", "BACKWARD", _compatibility,
                "which schema changes alter_topic accepts beyond the structural rules, and which older "
                "schema versions writers may still send in: BACKWARD, BACKWARD_TRANSITIVE, FORWARD, "
                "FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE or NONE (docs/semantics.md, \"Schema evolution\")",
                takes_effect="at once"),
    # compaction (txn_broker/compaction.py)
    TopicConfig("segment.bytes", lambda s: s.segment_bytes, positive,
                "compaction merges a partition's small committed segments into segments of about this size",
                takes_effect="next gc"),
    TopicConfig("min.compaction.lag.ms", 60_000, non_negative,
                "a segment is merged by compaction only once it is at least this old (ms; 0: at once)",
                takes_effect="next gc"),
    # Iceberg (docs/iceberg.md, txn_broker/iceberg)
    TopicConfig("iceberg.enabled", False, as_bool,
                "publish the topic's committed records to an Iceberg table (txn-broker iceberg sync/run)",
                takes_effect="next publish"),
    TopicConfig("iceberg.target.file.bytes", 128 * 1024 * 1024, positive,
                "the size the Iceberg table's Parquet data files aim at (Iceberg's write.target-file-size-bytes)",
                takes_effect="next publish"),
    # 2: on an idle machine 38 % less wall time than 1 for 6 % more CPU (docs/iceberg.md)
    TopicConfig("iceberg.publish.threads", 2, positive,
                "partitions the Iceberg publisher reads and writes at once (each in a thread of its own)",
                takes_effect="next publish"),
    # 15 minutes, not Iceberg's 5 days: a publish every 2 s under steady traffic makes 43,000
    # snapshots a day, and every commit rewrites the table's metadata with all of them
    TopicConfig("iceberg.snapshot.max.age.ms", 15 * 60 * 1000, positive,
                "Iceberg table snapshots older than this are expired by the publisher (Iceberg's "
                "history.expire.max-snapshot-age-ms); gc then deletes the files only they needed",
                takes_effect="next publish"),
    TopicConfig("iceberg.snapshot.min.keep", 1, positive,
                "the newest snapshots of the Iceberg table kept whatever their age (Iceberg's "
                "history.expire.min-snapshots-to-keep)", takes_effect="next publish"),
)}


#: Kafka's topic configs that have no meaning here, with Kafka's defaults: accepted (so that
#: Kafka's tools and clients can set them: CreateTopics, AlterConfigs, ``create_topic``),
#: stored as given, reported by DescribeConfigs as accepted and ignored, and acted on by
#: nothing. The other Kafka topic configs are in :data:`TOPIC_CONFIGS` (retention.ms,
#: retention.bytes, max.message.bytes, compression.type, segment.bytes,
#: min.compaction.lag.ms). A name in neither table is not a Kafka topic config: refused.
KAFKA_IGNORED_CONFIGS: dict[str, str] = {
    "cleanup.policy": "delete",  # "compact" (keep the last record per key) is not done here
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807",
    "message.downconversion.enable": "true",
    "message.format.version": "3.0-IV1",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def _ignored(key: str, value: object) -> str:
    """An accepted-and-ignored Kafka config's value, kept as Kafka's text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str | int | float):
        raise InvalidConfigError(f"topic config {key}={value!r} must be a string or a number")
    return str(value)


def validate_config(config: object, settings: Settings) -> dict[str, Any]:
    """A new topic's whole config: ``config`` checked key by key, every key not given at
    its default. InvalidConfigError for an unknown key or a bad value."""
    return {**defaults(settings), **check_changes(config)}


def check_changes(config: object) -> dict[str, Any]:
    """The keys of ``config`` checked and normalised (only those given).
    InvalidConfigError for an unknown key or a bad value; nothing else is looked at."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidConfigError(f"topic config must be a dict, got {type(config).__name__}")
    unknown = sorted(set(map(str, config)) - set(TOPIC_CONFIGS) - set(KAFKA_IGNORED_CONFIGS))
    if unknown:
        raise InvalidConfigError(f"unknown topic config(s) {unknown}; known: {sorted(TOPIC_CONFIGS)} "
                                 "and Kafka's other topic configs (accepted and ignored)")
    return {str(key): TOPIC_CONFIGS[str(key)].parse(str(key), value) if str(key) in TOPIC_CONFIGS
            else _ignored(str(key), value) for key, value in config.items()}


def defaults(settings: Settings) -> dict[str, Any]:
    return {name: c.default_for(settings) for name, c in TOPIC_CONFIGS.items()}


def with_legacy_defaults(stored: Mapping[str, Any], settings: Settings | None = None) -> dict[str, Any]:
    """A stored config with every key added since it was written filled in: its
    ``legacy`` value where it has one, else its default (``settings``: the broker's;
    None: the defaults of :class:`Settings`)."""
    out = dict(stored)
    for name, c in TOPIC_CONFIGS.items():
        if name not in out:
            out[name] = c.legacy if c.legacy is not None else c.default_for(settings or Settings())
    return out

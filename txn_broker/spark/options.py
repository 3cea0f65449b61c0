"""The options of the ``txn_topic`` data source: parsed, validated, and turned into plain
values that can travel to Spark's Python workers.

Names follow Spark's Kafka source where they mean the same thing (``startingOffsets``,
``endingOffsets``, ``failOnDataLoss``, ``minPartitions``, ``maxRecordsPerPartition``,
``subscribe``); the rest are the broker's own. Option names are case-insensitive (Spark
lower-cases them). An unknown option is an error, so a misspelt one is not silently ignored.

Where the broker lives: ``database.url``, ``storage.url`` and the S3 storage options
(:data:`STORAGE_OPTIONS`: ``s3.endpoint.url``, ``s3.region``, ``s3.access.key.id``,
``s3.secret.access.key``, ``s3.session.token``, ``s3.addressing.style``), which
``connection_options(broker)`` takes from the broker the caller opened: the storage
settings travel to Spark's Python workers inside the data source's options, never through
their environment. An option not given falls back, in the worker, to the
``TXN_BROKER_*`` / ``AWS_*`` environment of that worker (which is the driver's
environment when the SparkSession started), else the embedded default. The database is
used on the driver side only (planning, commit); executors only read and write objects.
Spark shows no option of a Python data source in its plans or UI (docs/spark.md); should
it, it redacts the values of options whose name matches ``spark.sql.redaction.options.regex``
(default ``(?i)url``) or ``spark.redaction.regex`` (default
``(?i)secret|password|token|access[.]key``), which is why these names end in ``url`` or
contain ``secret``, ``token`` or ``access.key``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ..config import Settings, resolve_database_url, resolve_storage_url
from ..errors import InvalidConfigError
from ..log.partition import ISOLATION_LEVELS, READ_COMMITTED
from ..log.types import TransactionHandle
from ..names import validate_id, validate_topic_name
from ..retry import DEFAULT_RETRY_BUDGET_MS
from .log_guard import guard_secrets

#: data source option -> storage option (txn_broker.storage.S3_OPTIONS)
STORAGE_OPTIONS = {
    "s3.endpoint.url": "endpoint_url",
    "s3.region": "region_name",
    "s3.access.key.id": "aws_access_key_id",
    "s3.secret.access.key": "aws_secret_access_key",
    "s3.session.token": "aws_session_token",
    "s3.addressing.style": "addressing_style",
}
CONNECTION_OPTIONS = ("database.url", "storage.url", "retry.budget.ms", *STORAGE_OPTIONS)
READ_OPTIONS = (
    "topic", "topics", "subscribe", "group.id", "startingoffsets", "endingoffsets", "isolation.level",
    "failondataloss", "minpartitions", "maxrecordsperpartition", "maxbytesperpartition",
)
HANDLE_OPTIONS = ("transactional.id", "producer.id", "producer.epoch", "txn.id")
WRITE_OPTIONS = ("topic", "key.column", "segment.bytes", *HANDLE_OPTIONS)
#: Spark's default ``spark.sql.files.maxPartitionBytes``
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
#: the broker's own default (Settings.segment_bytes)
DEFAULT_SEGMENT_BYTES = Settings().segment_bytes


class Secret:
    """A value (the database URL) that must never be printed: its repr is masked."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __getstate__(self) -> str:
        return self._value

    def __setstate__(self, state: str) -> None:
        self._value = state


@dataclass(frozen=True)
class Connection:
    """Where the broker's metadata database and objects are. Only the driver side opens
    the database; executors use :meth:`StorageLocation.open_store`."""

    database_url: Secret
    location: StorageLocation

    def open_broker(self) -> Any:
        import txn_broker

        return txn_broker.connect(self.database_url.reveal(), self.location.url,
                                  storage_options=self.location.storage_options(), pool_size=1,
                                  retry_budget_ms=self.location.retry_budget_ms)

    def storage(self) -> StorageLocation:
        return self.location


@dataclass(frozen=True)
class StorageLocation:
    """What executors need to read and upload segment objects: the storage URL and its
    storage options (secrets among them, so they are left out of the repr)."""

    url: str
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: the driver's broker's retry budget (``retry.budget.ms``): executors retry as it does
    retry_budget_ms: int = DEFAULT_RETRY_BUDGET_MS

    def storage_options(self) -> dict[str, str]:
        return dict(self.options)

    def open_store(self) -> Any:
        return _store(self.url, self.options, self.retry_budget_ms)


_stores: dict[tuple[str, tuple[tuple[str, str], ...], int], Any] = {}


def _store(url: str, options: tuple[tuple[str, str], ...], retry_budget_ms: int) -> Any:
    # Spark reuses Python workers across tasks: keep one store (one S3 client) per process
    # and location; two locations (two brokers) never share one.
    from ..storage import open_store

    store = _stores.get((url, options, retry_budget_ms))
    if store is None:
        store = _stores[(url, options, retry_budget_ms)] = open_store(url, retry_budget_ms=retry_budget_ms,
                                                                      **dict(options))
    return store


def check_known(options: Mapping[str, str], known: tuple[str, ...], action: str) -> None:
    allowed = {k.lower() for k in (*CONNECTION_OPTIONS, *known)} | {"path"}
    unknown = sorted(k for k in options if k.lower() not in allowed)
    if unknown:
        raise InvalidConfigError(
            f"unknown txn_topic {action} option(s) {unknown}; known: {sorted(allowed - {'path'})}"
        )
    if options.get("path"):
        raise InvalidConfigError("txn_topic takes no path: name the topic with .option('topic', ...)")


def connection(options: Mapping[str, str]) -> Connection:
    url, _embedded = resolve_database_url(options.get("database.url") or None)
    try:
        sa.make_url(url)
    except Exception:  # the message would quote the URL, password included
        raise InvalidConfigError("option database.url is not a valid SQLAlchemy URL") from None
    given = {k.lower(): v for k, v in options.items()}
    storage = tuple(sorted((name, str(given[option])) for option, name in STORAGE_OPTIONS.items()
                           if given.get(option)))
    budget = _int(given, "retry.budget.ms", DEFAULT_RETRY_BUDGET_MS, minimum=0)
    assert budget is not None
    return Connection(Secret(url), StorageLocation(resolve_storage_url(options.get("storage.url") or None), storage,
                                                   budget))


def connection_options(broker: Any) -> dict[str, str]:
    """The options that point a ``txn_topic`` read or write at ``broker``'s database and
    storage, with the storage options ``broker`` was opened with (its S3 endpoint,
    region, credentials). They contain the database password and the S3 secret key: pass
    them to Spark, never print them."""
    opts = {
        "database.url": broker._db.url.render_as_string(hide_password=False),
        "storage.url": broker._store.url,
        "retry.budget.ms": str(broker.settings.retry_budget_ms),
    }
    names = {name: option for option, name in STORAGE_OPTIONS.items()}
    for name, value in broker._store.options().items():
        opts[names[name]] = value
    # py4j logs the commands that carry these options at DEBUG: mask the secrets there
    secrets = ("s3.access.key.id", "s3.secret.access.key", "s3.session.token")
    guard_secrets(broker._db.url.password, *(opts.get(o) for o in secrets))
    return opts


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidConfigError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"option {name} must be true or false, got {raw!r}")
    return text == "true"


@dataclass(frozen=True)
class ReadOptions:
    topics: tuple[str, ...]
    group_id: str | None
    starting: str
    ending: str
    isolation_level: str
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_bytes_per_partition: int


def read_options(options: Mapping[str, str]) -> ReadOptions:
    check_known(options, READ_OPTIONS, "read")
    given = [k for k in ("topic", "topics", "subscribe") if options.get(k)]
    if len(given) != 1:
        raise InvalidConfigError(
            "a txn_topic read needs exactly one of the options topic, topics (comma-separated) "
            f"or subscribe; got {given or 'none'}"
        )
    topics = tuple(dict.fromkeys(t.strip() for t in str(options[given[0]]).split(",") if t.strip()))
    if not topics:
        raise InvalidConfigError(f"option {given[0]} names no topic")
    for topic in topics:
        validate_topic_name(topic)
    group = options.get("group.id")
    isolation = str(options.get("isolation.level") or READ_COMMITTED).strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise InvalidConfigError(f"option isolation.level must be one of {ISOLATION_LEVELS}, got {isolation!r}")
    max_bytes = _int(options, "maxbytesperpartition", DEFAULT_MAX_BYTES_PER_PARTITION)
    assert max_bytes is not None
    return ReadOptions(
        topics=topics,
        group_id=None if not group else validate_id("group id", group),
        starting=str(options.get("startingoffsets") or "earliest").strip(),
        ending=str(options.get("endingoffsets") or "latest").strip(),
        isolation_level=isolation,
        fail_on_data_loss=_bool(options, "failondataloss", True),
        min_partitions=_int(options, "minpartitions", None),
        max_records_per_partition=_int(options, "maxrecordsperpartition", None),
        max_bytes_per_partition=max_bytes,
    )


@dataclass(frozen=True)
class WriteOptions:
    topic: str
    key_column: str | None
    segment_bytes: int
    handle: TransactionHandle | None  # None: an idempotent write, no transaction


def write_options(options: Mapping[str, str]) -> WriteOptions:
    check_known(options, WRITE_OPTIONS, "write")
    topic = options.get("topic")
    if not topic:
        raise InvalidConfigError("a txn_topic write needs the option topic")
    validate_topic_name(topic)
    segment_bytes = _int(options, "segment.bytes", DEFAULT_SEGMENT_BYTES)
    assert segment_bytes is not None
    present = [k for k in HANDLE_OPTIONS if options.get(k) not in (None, "")]
    handle = None
    if present:
        missing = [k for k in HANDLE_OPTIONS if k not in present]
        if missing:
            raise InvalidConfigError(
                f"a transactional txn_topic write needs all of {list(HANDLE_OPTIONS)}; missing {missing} "
                "(txn_broker.spark.transaction_options(producer) gives them)"
            )
        producer_id = _int(options, "producer.id", None, minimum=0)
        epoch = _int(options, "producer.epoch", None, minimum=0)
        txn_id = _int(options, "txn.id", None, minimum=0)
        assert producer_id is not None and epoch is not None and txn_id is not None
        handle = TransactionHandle(validate_id("transactional id", options["transactional.id"]),
                                   producer_id, epoch, txn_id)
    return WriteOptions(topic, options.get("key.column") or None, segment_bytes, handle)


def transaction_options(handle: TransactionHandle) -> dict[str, str]:
    """The write options that register a write in the open transaction ``handle``."""
    if handle.transactional_id is None or handle.txn_id is None:
        return {}
    return {"transactional.id": handle.transactional_id, "producer.id": str(handle.producer_id),
            "producer.epoch": str(handle.epoch), "txn.id": str(handle.txn_id)}


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))

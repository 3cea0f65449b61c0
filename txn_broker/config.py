"""Where the broker keeps its data, and the broker-wide settings.

Resolution order for each location: the argument, then the environment
(``TXN_BROKER_DATABASE_URL``, ``TXN_BROKER_STORAGE_URL``), then the embedded default
under ``$TXN_BROKER_HOME`` (``./.txn_broker``): SQLite ``broker.db`` plus ``segments/``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidConfigError

DAY_MS = 24 * 3600 * 1000


#: settings for which 0 makes no sense (no threads, no connections, no bytes)
_POSITIVE = ("max_transaction_timeout_ms", "transaction_timeout_ms", "stage_transaction_timeout_ms",
             "segment_bytes", "max_message_bytes", "upload_threads", "pool_size")


@dataclass(frozen=True)
class Settings:
    """Broker settings (Kafka's names where they exist), passed as ``connect(**settings)``."""

    #: the largest ``transaction_timeout_ms`` a producer may ask for
    max_transaction_timeout_ms: int = 900_000
    #: a producer's ``transaction_timeout_ms`` when it gives none (the one default; every
    #: signature takes None to mean this)
    transaction_timeout_ms: int = 60_000
    #: the transaction timeout of a Spark stage (a driver reading and writing whole topics)
    #: when it gives none
    stage_transaction_timeout_ms: int = 600_000
    #: an idle transactional id is removed this long after its last transaction ended
    transactional_id_expiration_ms: int = 7 * DAY_MS
    #: the sequence state of an idle producer id may be dropped after this long
    producer_id_expiration_ms: int = DAY_MS
    #: a producer's buffer for one partition becomes a segment at this size
    segment_bytes: int = 8 * 1024 * 1024
    #: default ``max.message.bytes`` of new topics (Kafka's default)
    max_message_bytes: int = 1_048_588
    #: prepared transactions younger than this are left to the committer that prepared them
    complete_prepared_grace_ms: int = 0
    #: object upload threads per producer
    upload_threads: int = 4
    #: connections per process to the metadata database
    pool_size: int = 5
    #: how long one call may keep retrying a transient failure (an unreachable database or
    #: object store, a rolled-back transaction) before the caller hears of it: the total
    #: wait between attempts (txn_broker.retry; docs/semantics.md, "How long a call retries")
    retry_budget_ms: int = 30_000

    @classmethod
    def from_kwargs(cls, values: dict[str, Any]) -> Settings:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidConfigError(
                f"unknown broker setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        for name, value in values.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidConfigError(f"broker setting {name} must be a non-negative int")
        settings = cls(**values)
        zero = [name for name in _POSITIVE if getattr(settings, name) <= 0]
        if zero:
            raise InvalidConfigError(f"broker setting(s) {', '.join(zero)} must be > 0")
        return settings


def broker_home() -> Path:
    return Path(os.environ.get("TXN_BROKER_HOME") or ".txn_broker").absolute()


def resolve_database_url(database_url: str | None) -> tuple[str, bool]:
    """The database URL to use and whether it is the embedded default."""
    if database_url:
        return database_url, False
    env = os.environ.get("TXN_BROKER_DATABASE_URL")
    if env:
        return env, False
    return f"sqlite:///{broker_home() / 'broker.db'}", True


def resolve_storage_url(storage_url: str | None) -> str:
    if storage_url:
        return storage_url
    env = os.environ.get("TXN_BROKER_STORAGE_URL")
    if env:
        return env
    return (broker_home() / "segments").as_uri()


def s3_endpoint_url() -> str | None:
    """The S3 endpoint when none is given: ``TXN_BROKER_S3_ENDPOINT_URL``, else AWS's."""
    return os.environ.get("TXN_BROKER_S3_ENDPOINT_URL") or None

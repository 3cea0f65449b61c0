"""Errors of the Airflow layer, under txn_broker's single root ``TxnBrokerError``."""

from __future__ import annotations

from txn_broker.errors import InvalidConfigError, InvalidInputError, TxnBrokerError, UnknownTopicOrPartitionError


class SourceNotFoundError(InvalidInputError):
    """No input file matches the ingest source; nothing was written."""


class UnsupportedFormatError(InvalidInputError):
    """The ingest format is not one of csv, jsonl or parquet (or cannot be inferred)."""


class StageDefinitionError(InvalidInputError):
    """The Spark stage is not a readable file with a ``run`` function, nor an importable
    dotted-path callable."""


class CallableResultError(InvalidInputError):
    """A source callable returned something other than a pyarrow Table or a list of dicts."""


class SinkOffsetConflictError(TxnBrokerError):
    """Another load of the same group moved the sink offsets first; nothing was written by
    this one. Retry: it starts from the new offsets."""

    retriable = True


class WarehouseTypeError(InvalidInputError):
    """A topic column has an Arrow type with no SQL column type to load it into."""


class LoadStalledError(TxnBrokerError):
    """A load made no progress below the end offsets it fixed (the log changed under it);
    nothing past the last committed batch was written. Retry."""

    retriable = True


class EventPayloadError(InvalidInputError):
    """An asset event's payload is not a committed-records event of the event trigger (or
    it is malformed): the run cannot tell which offset ranges to process."""


class TopicDeclarationError(InvalidInputError):
    """An operator's ``topics=`` is not a list of ``TopicSpec`` values with distinct names
    (raised where the DAG is parsed)."""


class MissingTopicsError(UnknownTopicOrPartitionError):
    """A topic the task reads or writes does not exist; found when the task starts, before
    any Spark JVM or transaction. Nothing was written."""


class ConnectionFieldError(InvalidConfigError):
    """A field of a connection is malformed (an unparsable or unsupported URL, settings that
    are not a JSON object of known settings). The message names the connection id and the
    field and never shows a secret. Fix the connection; nothing was written."""

    def __init__(self, conn_id: str, field: str, problem: str) -> None:
        self.conn_id = conn_id
        self.field = field
        super().__init__(f"connection {conn_id!r}, field {field!r}: {problem}")


class WarehouseUnavailableError(TxnBrokerError):
    """The warehouse database of a load could not be reached or refused the login; the
    message names where its URL came from, password masked. Nothing was loaded. Retry
    once it is reachable (or fix the URL or login)."""

    retriable = True


class WarehouseURLError(InvalidConfigError):
    """The warehouse URL of a load is malformed or names a database driver that is not
    installed. The message says where the URL came from (the task's ``warehouse_url``,
    ``$TXN_BROKER_WAREHOUSE_URL`` or a Postgres connection), password masked. Nothing was
    loaded."""

"""Errors of the Airflow layer, under txn_broker's single root ``TxnBrokerError``."""

from __future__ import annotations

from txn_broker.errors import InvalidInputError, TxnBrokerError, UnknownTopicOrPartitionError


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

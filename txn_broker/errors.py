"""Every error the broker raises, under one root.

Each class says how a caller must handle it (docs/semantics.md, "Errors and what to do with each"):

* ``retriable``: transient; retry the same call with backoff.
* ``abortable``: the transaction cannot commit; abort it (or re-init) and redo the work.
* ``fatal``: this producer instance is finished; stop it, do not retry.

Bad input (unknown topic, schema mismatch, invalid names or sizes) is none of those:
fix the input. Nothing was written when it is raised.
"""

from __future__ import annotations


class TxnBrokerError(Exception):
    """The broker failed."""

    retriable: bool = False
    abortable: bool = False
    fatal: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.__class__.__name__).strip())

    @property
    def handling(self) -> str:
        """One word for how to handle this error: retry, abort, fatal or fix-input."""
        if self.fatal:
            return "fatal"
        if self.abortable:
            return "abort"
        if self.retriable:
            return "retry"
        return "fix-input"


# -- bad input: nothing written ------------------------------------------------------------


class InvalidInputError(TxnBrokerError):
    """The request is malformed; nothing was written."""


class InvalidTopicNameError(InvalidInputError):
    """Topic names are 1-249 characters of [a-zA-Z0-9._-] and neither '.' nor '..'."""


class InvalidNameError(InvalidInputError):
    """A transactional id or group id is empty, too long or contains control characters."""


class UnknownTopicOrPartitionError(InvalidInputError):
    """The topic or partition does not exist."""


class TopicAlreadyExistsError(InvalidInputError):
    """A topic with this name already exists."""


class SchemaMismatchError(InvalidInputError):
    """The data does not match the topic's schema."""


class RecordTooLargeError(InvalidInputError):
    """A record is larger than the topic's max.message.bytes."""


class InvalidConfigError(InvalidInputError):
    """An unknown or invalid topic config, broker setting or option."""


class OffsetOutOfRangeError(InvalidInputError):
    """The offset lies outside the partition's log."""


class OffsetMetadataTooLargeError(InvalidInputError):
    """A committed offset's metadata string is longer than the broker keeps (4096
    characters, Kafka's offset.metadata.max.bytes)."""


class UnknownTransactionalIdError(InvalidInputError):
    """No such transactional id is known to the coordinator."""


class UnknownGroupError(InvalidInputError):
    """No such consumer group has committed offsets."""


class InvalidTransactionTimeoutError(InvalidInputError):
    """The requested transaction timeout is not positive or exceeds max_transaction_timeout_ms."""


# -- caller bugs -----------------------------------------------------------------------------


class InvalidTxnStateError(TxnBrokerError):
    """The call does not fit the transaction's state (a bug in the caller)."""

    abortable = True


class IllegalStateError(TxnBrokerError):
    """The call is not legal in the client's current state: it is closed, it was
    initialised already, or a commit (abort) whose outcome is unknown must be retried
    before anything else (a bug in the caller; the message says what to call)."""


# -- transactions ----------------------------------------------------------------------------


class ProducerFencedError(TxnBrokerError):
    """A newer instance with the same transactional id exists (or the coordinator aborted
    this one's transaction after its timeout); this instance is a zombie and must stop."""

    fatal = True


class InvalidProducerEpochError(ProducerFencedError):
    """The request carries an older producer epoch than the coordinator's."""


class InvalidPidMappingError(TxnBrokerError):
    """The coordinator no longer knows this producer's transactional id: it expired while
    the producer idled (transactional_id_expiration_ms), and no newer instance has taken
    it (KIP-360). Abort the transaction: the abort gives the producer a new epoch (or a
    new producer id) and the next transaction proceeds."""

    abortable = True


class OutOfOrderSequenceError(TxnBrokerError):
    """A sequence number gap: an append would be lost or reordered. Fatal for an
    idempotent producer; a transactional producer raises it as abortable (its transaction
    is doomed; the abort gives the producer a new epoch and the next transaction proceeds),
    as Kafka's does."""

    fatal = True


class UnknownProducerStateError(OutOfOrderSequenceError):
    """The broker holds no sequence state for this producer and partition (it expired);
    a producer with nothing in flight may restart that partition at sequence 0."""


class ConcurrentTransactionsError(TxnBrokerError):
    """The coordinator is completing the previous transaction of this id; retry shortly."""

    retriable = True


# -- infrastructure: transient ---------------------------------------------------------------


class DatabaseUnavailableError(TxnBrokerError):
    """The metadata database cannot be reached or refused the operation; retry with backoff."""

    retriable = True


class DatabasePermissionError(TxnBrokerError):
    """The database role lacks a privilege this operation needs (see sql/roles.sql):
    connect as the role meant for it; retrying cannot help."""

    fatal = True


class StorageUnavailableError(TxnBrokerError):
    """Object storage cannot be reached or keeps failing; retry with backoff."""

    retriable = True


class StoragePermissionError(TxnBrokerError):
    """The object store refused the request itself: wrong or expired credentials, no
    permission on the bucket or prefix, or no such bucket. Fix the storage settings;
    retrying cannot help."""

    fatal = True


class CorruptSegmentError(TxnBrokerError):
    """A segment object is missing or does not match its metadata (run `txn-broker fsck`)."""

    fatal = True


class SchemaVersionError(TxnBrokerError):
    """The metadata database's schema is missing or older than this code:
    run `txn-broker db upgrade` with the owner role."""

    fatal = True


# -- topic alteration (schema evolution, partitions, configs): bad input, nothing changed --


class IncompatibleSchemaError(SchemaMismatchError):
    """A schema change the topic's rules forbid (docs/semantics.md, "Schema evolution");
    the topic is unchanged. ``field`` names the offending field (a dotted path) and
    ``rule`` the rule it breaks."""

    def __init__(self, message: str | None = None, *, field: str = "", rule: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule


class InvalidPartitionsError(InvalidConfigError):
    """A topic's partition count can only grow; nothing changed."""


# -- Iceberg tables (txn_broker/iceberg, docs/iceberg.md) -------------------------------------


class IcebergSchemaError(InvalidConfigError):
    """The topic's schema has a type an Iceberg table cannot hold without loss; nothing
    was written (docs/iceberg.md, "Schema")."""


class CatalogUnavailableError(TxnBrokerError):
    """The Iceberg catalog cannot be reached or failed; retry with backoff. Nothing was
    committed to the table by the failing call."""

    retriable = True


class IcebergCommitConflictError(TxnBrokerError):
    """Another publisher committed to the table first; this one's files are orphans (gc
    removes them) and it publishes again from the table's new offsets. Retry."""

    retriable = True
# -- hostile and careless input (issue 31) ---------------------------------------------------


class TimestampOutOfRangeError(SchemaMismatchError):
    """A timestamp or date outside years 1..9999 (the range every reader can show); nothing
    was written."""


class CredentialsInUrlError(InvalidConfigError):
    """A storage URL carries credentials (``s3://KEY:SECRET@bucket``): give them as storage
    options or in the environment boto3 reads instead. Refused before any request is made;
    retrying cannot help."""

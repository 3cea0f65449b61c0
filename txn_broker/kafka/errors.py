"""The broker's typed errors as Kafka error codes.

Kafka clients act on the code alone, so each broker error maps to the code whose client
handling matches the error's own (retriable, abortable, fatal, fix-input). The mapping is
exact where Kafka has the same error; the table in docs/kafka-protocol.md lists it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from .. import errors as e


class NotCoordinatorError(e.TxnBrokerError):
    """This listener is no longer the group's coordinator (it was taken as down meanwhile,
    as after a SIGSTOP); the client finds the coordinator again and retries."""

    retriable = True


class ClientGoneError(e.TxnBrokerError):
    """The client closed the connection before its request ran (it timed the request out
    and retries it, perhaps at another listener): the request is not run (kafka/peer.py)."""

    retriable = True


#: most specific class first: the first ``isinstance`` match wins
_BY_CLASS: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (NotCoordinatorError, ErrorCode.not_coordinator),
    (ClientGoneError, ErrorCode.request_timed_out),
    # the epoch in the request is older than the coordinator's: Kafka answers
    # PRODUCER_FENCED from InitProducerId, AddPartitionsToTxn, EndTxn (KIP-588) and
    # INVALID_PRODUCER_EPOCH from Produce; the handler picks (see ``for_produce``)
    (e.InvalidProducerEpochError, ErrorCode.producer_fenced),
    (e.ProducerFencedError, ErrorCode.producer_fenced),
    (e.InvalidPidMappingError, ErrorCode.invalid_producer_id_mapping),
    # the broker holds no sequence state for this producer (it expired): KIP-360's answer
    (e.UnknownProducerStateError, ErrorCode.unknown_producer_id),
    (e.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (e.ConcurrentTransactionsError, ErrorCode.concurrent_transactions),
    (e.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (e.InvalidTransactionTimeoutError, ErrorCode.invalid_transaction_timeout),
    (e.UnknownTransactionalIdError, ErrorCode.transactional_id_not_found),
    (e.InvalidTopicNameError, ErrorCode.invalid_topic_exception),
    (e.UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
    (e.TopicAlreadyExistsError, ErrorCode.topic_already_exists),
    (e.SchemaMismatchError, ErrorCode.invalid_record),
    (e.RecordTooLargeError, ErrorCode.message_too_large),
    (e.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (e.OffsetMetadataTooLargeError, ErrorCode.offset_metadata_too_large),
    (e.UnknownGroupError, ErrorCode.group_id_not_found),
    (e.InvalidNameError, ErrorCode.invalid_request),
    (e.InvalidPartitionsError, ErrorCode.invalid_partitions),
    (e.InvalidConfigError, ErrorCode.invalid_config),
    (e.InvalidInputError, ErrorCode.invalid_request),
    (e.IllegalStateError, ErrorCode.invalid_txn_state),
    (e.DatabaseUnavailableError, ErrorCode.coordinator_not_available),
    (e.StorageUnavailableError, ErrorCode.kafka_storage_error),
    (e.StoragePermissionError, ErrorCode.kafka_storage_error),
    (e.CorruptSegmentError, ErrorCode.kafka_storage_error),
    (e.DatabasePermissionError, ErrorCode.cluster_authorization_failed),
    (e.SchemaVersionError, ErrorCode.unknown_server_error),
)


def error_code(error: BaseException) -> ErrorCode:
    """The Kafka error code for a broker error (UNKNOWN_SERVER_ERROR for anything else)."""
    for cls, code in _BY_CLASS:
        if isinstance(error, cls):
            return code
    return ErrorCode.unknown_server_error


def for_produce(error: BaseException) -> ErrorCode:
    """Produce answers a stale epoch with INVALID_PRODUCER_EPOCH (as Kafka's partition
    leader does), which a transactional client treats as fatal like PRODUCER_FENCED."""
    if isinstance(error, e.ProducerFencedError):
        return ErrorCode.invalid_producer_epoch
    return error_code(error)

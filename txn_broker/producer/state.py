"""The producer's state machine: its states, the moves between them (Kafka's
``TransactionManager`` rules) and the checks every client call makes against them."""

from __future__ import annotations

from enum import StrEnum

from ..errors import IllegalStateError, InvalidTxnStateError, ProducerFencedError


class ProducerState(StrEnum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"
    CLOSED = "closed"


P = ProducerState

#: The producer's states and, for each, the states it may move to, with the reason. Every
#: change goes through :func:`move`, which refuses any other move (as Kafka's
#: ``TransactionManager`` does). ``close()`` may follow any state but CLOSED.
#:
#: * UNINITIALIZED: a transactional producer before ``init_transactions()``, which moves it
#:   to READY (or FATAL_ERROR: a newer instance initialised concurrently). A second
#:   ``init_transactions()`` is refused (IllegalStateError): it would fence nothing but the
#:   producer itself.
#: * READY -> IN_TRANSACTION: ``begin_transaction()``. (An idempotent producer is READY
#:   from the start and stays READY.)
#: * IN_TRANSACTION -> COMMITTING / ABORTING: ``commit_transaction()`` /
#:   ``abort_transaction()``; -> ABORTABLE_ERROR: a send, flush or offsets call failed in a
#:   way that dooms the transaction (e.g. InvalidPidMappingError, KIP-360, or a refused
#:   sequence: OutOfOrderSequenceError, whose abort bumps the epoch); -> FATAL_ERROR: fenced.
#: * COMMITTING -> READY: committed. COMMITTING -> COMMITTING: a commit that failed with a
#:   retriable or unknown error (a timeout, a lost reply, the database down) keeps the
#:   producer here, and only a retried ``commit_transaction()`` may follow: the commit may
#:   have landed, so an abort is refused locally (as in Kafka); the retry reports the real
#:   outcome. -> ABORTABLE_ERROR: the coordinator refused the commit (it did not happen);
#:   -> FATAL_ERROR: fenced.
#: * ABORTING -> READY: aborted. ABORTING -> ABORTING: the same rule for an abort whose
#:   outcome is unknown: only a retried ``abort_transaction()`` may follow.
#: * ABORTABLE_ERROR -> ABORTING: the only way on is ``abort_transaction()``.
#: * FATAL_ERROR: only ``close()``; make a new producer.
TRANSITIONS: dict[ProducerState, frozenset[ProducerState]] = {
    P.UNINITIALIZED: frozenset({P.READY, P.FATAL_ERROR, P.CLOSED}),
    P.READY: frozenset({P.IN_TRANSACTION, P.FATAL_ERROR, P.CLOSED}),
    P.IN_TRANSACTION: frozenset({P.COMMITTING, P.ABORTING, P.ABORTABLE_ERROR, P.FATAL_ERROR, P.CLOSED}),
    P.COMMITTING: frozenset({P.READY, P.COMMITTING, P.ABORTABLE_ERROR, P.FATAL_ERROR, P.CLOSED}),
    P.ABORTING: frozenset({P.READY, P.ABORTING, P.FATAL_ERROR, P.CLOSED}),
    P.ABORTABLE_ERROR: frozenset({P.ABORTING, P.FATAL_ERROR, P.CLOSED}),
    P.FATAL_ERROR: frozenset({P.CLOSED}),
    P.CLOSED: frozenset(),
}


def move(current: ProducerState, target: ProducerState, who: object) -> ProducerState:
    """``target`` if the table allows going there from ``current``, else InvalidTxnStateError."""
    if target not in TRANSITIONS[current]:
        raise InvalidTxnStateError(f"producer {who}: cannot go from {current.value} to {target.value}")
    return target


def require(current: ProducerState, states: tuple[ProducerState, ...], *, action: str,
            transactional_id: str | None, abortable_cause: str) -> None:
    """Refuse ``action`` unless the producer is in one of ``states``: ProducerFencedError
    after a fatal error, IllegalStateError once closed, InvalidTxnStateError otherwise."""
    if current == P.FATAL_ERROR:
        raise ProducerFencedError(
            f"producer {transactional_id!r} was fenced or failed fatally; create a new one"
        )
    if current == P.CLOSED:
        raise IllegalStateError("the producer is closed")
    if current in states:
        return
    if current == P.ABORTABLE_ERROR:
        raise InvalidTxnStateError(
            f"cannot {action}: the transaction of producer {transactional_id!r} failed "
            f"({abortable_cause}); call abort_transaction() first"
        )
    raise InvalidTxnStateError(
        f"cannot {action}: producer {transactional_id or ''} is {current.value}"
        + (" (call init_transactions() first)" if current == P.UNINITIALIZED else "")
    )

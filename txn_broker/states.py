"""The coordinator's transaction states, the one table of legal transitions, and the one
classification of a state: open, prepared, idle, and when an open transaction is hanging.

Everything that asks "is this transaction open?" or "is it hanging?" (the models, the CLI,
the Airflow plugins, the UI through its API) asks here."""

from __future__ import annotations

from enum import StrEnum

from .errors import InvalidTxnStateError


class TxnState(StrEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"


S = TxnState

#: from-state -> the states it may move to. Everything else is InvalidTxnState.
LEGAL_TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    # a new id starts Empty; Empty -> Empty is an init that bumps the epoch
    S.EMPTY: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.ONGOING: frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}),
    S.PREPARE_COMMIT: frozenset({S.COMPLETE_COMMIT}),
    S.PREPARE_ABORT: frozenset({S.COMPLETE_ABORT}),
    # an abort forced by the coordinator after bumping the epoch
    S.PREPARE_EPOCH_FENCE: frozenset({S.PREPARE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.COMPLETE_ABORT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.DEAD: frozenset(),
}

OPEN_STATES = frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE})
PREPARED_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE})
IDLE_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def is_open(state: str) -> bool:
    """Whether an id in ``state`` has a transaction that is not finished (it holds back the
    last stable offset of every partition it wrote)."""
    return state in OPEN_STATES


def open_age_ms(state: str, start_ms: int | None, now_ms: int) -> int | None:
    """How long the id's open transaction has run, by the database clock; None when the id
    has no open transaction (or it has not started its clock: no partition yet)."""
    if not is_open(state) or not start_ms:
        return None
    return now_ms - start_ms


def is_hanging(state: str, start_ms: int | None, timeout_ms: int, now_ms: int) -> bool:
    """An ``Ongoing`` transaction older than its own timeout: the one the timeout sweep
    aborts (docs/semantics.md, "Timeouts, expiry and the sweeps"). A prepared transaction
    is decided already and is rolled forward, never timed out, so it never hangs."""
    age = open_age_ms(state, start_ms, now_ms)
    return state == S.ONGOING and age is not None and age > timeout_ms


def state_sets() -> dict[str, list[str]]:
    """The states and their classes as plain strings, in the order of :class:`TxnState`
    (what the UI's API serves to the page)."""
    return {
        "states": [s.value for s in TxnState],
        "open": [s.value for s in TxnState if s in OPEN_STATES],
        "prepared": [s.value for s in TxnState if s in PREPARED_STATES],
        "idle": [s.value for s in TxnState if s in IDLE_STATES],
        # an id that becomes Dead is removed, so a listed id is in any other state
        "listed": [s.value for s in TxnState if s is not S.DEAD],
    }


def check_transition(current: TxnState, target: TxnState, transactional_id: str) -> None:
    if target not in LEGAL_TRANSITIONS[current]:
        raise InvalidTxnStateError(
            f"transactional id {transactional_id!r}: illegal transition {current} -> {target}"
        )

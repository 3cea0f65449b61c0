"""The coordinator's transaction states and the one table of legal transitions."""

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


def check_transition(current: TxnState, target: TxnState, transactional_id: str) -> None:
    if target not in LEGAL_TRANSITIONS[current]:
        raise InvalidTxnStateError(
            f"transactional id {transactional_id!r}: illegal transition {current} -> {target}"
        )

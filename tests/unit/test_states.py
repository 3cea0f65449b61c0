from __future__ import annotations

import pytest

from txn_broker.errors import InvalidTxnStateError
from txn_broker.states import LEGAL_TRANSITIONS, TxnState, check_transition

S = TxnState


def test_every_state_has_a_row():
    assert set(LEGAL_TRANSITIONS) == set(TxnState)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (S.EMPTY, S.ONGOING),
        (S.ONGOING, S.PREPARE_COMMIT),
        (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
        (S.COMPLETE_COMMIT, S.ONGOING),
        (S.ONGOING, S.PREPARE_ABORT),
        (S.PREPARE_ABORT, S.COMPLETE_ABORT),
        (S.ONGOING, S.PREPARE_EPOCH_FENCE),
        (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
        (S.COMPLETE_ABORT, S.DEAD),
    ],
)
def test_legal(src, dst):
    check_transition(src, dst, "t")


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (S.EMPTY, S.PREPARE_COMMIT),
        (S.PREPARE_COMMIT, S.PREPARE_ABORT),
        (S.PREPARE_COMMIT, S.COMPLETE_ABORT),
        (S.PREPARE_ABORT, S.COMPLETE_COMMIT),
        (S.ONGOING, S.DEAD),
        (S.DEAD, S.ONGOING),
        (S.COMPLETE_COMMIT, S.PREPARE_COMMIT),
    ],
)
def test_illegal(src, dst):
    with pytest.raises(InvalidTxnStateError, match="illegal transition"):
        check_transition(src, dst, "t")

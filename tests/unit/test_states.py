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


def test_the_state_classes_partition_the_states():
    from txn_broker.states import IDLE_STATES, OPEN_STATES, PREPARED_STATES

    assert PREPARED_STATES < OPEN_STATES
    assert OPEN_STATES | IDLE_STATES | {S.DEAD} == set(TxnState)
    assert not OPEN_STATES & IDLE_STATES


def test_hanging_is_ongoing_past_its_own_timeout():
    """docs/semantics.md: the timeout sweep aborts an Ongoing transaction older than its
    timeout; a prepared one is decided and rolled forward, so it never hangs."""
    from txn_broker.states import is_hanging, is_open, open_age_ms

    assert is_hanging("Ongoing", start_ms=1_000, timeout_ms=500, now_ms=1_501)
    assert not is_hanging("Ongoing", start_ms=1_000, timeout_ms=500, now_ms=1_500)  # not past it yet
    assert not is_hanging("Ongoing", start_ms=None, timeout_ms=500, now_ms=9_999)  # no partition yet
    for prepared in ("PrepareCommit", "PrepareAbort", "PrepareEpochFence"):
        assert is_open(prepared) and open_age_ms(prepared, 1_000, 9_000) == 8_000
        assert not is_hanging(prepared, start_ms=1_000, timeout_ms=500, now_ms=9_000)
    for idle in ("Empty", "CompleteCommit", "CompleteAbort", "Dead"):
        assert not is_open(idle) and open_age_ms(idle, 1_000, 9_000) is None
        assert not is_hanging(idle, start_ms=1_000, timeout_ms=500, now_ms=9_000)


def test_the_summary_and_the_ui_use_the_one_rule():
    from txn_broker import TransactionSummary

    def summary(state: str) -> TransactionSummary:
        return TransactionSummary("t", 1, 0, state, 500, 7, 1_000, 1_000, 1, 1, 1, now_ms=9_000)

    assert summary("Ongoing").is_hanging and summary("Ongoing").age_ms == 8_000
    assert not summary("PrepareCommit").is_hanging and summary("PrepareCommit").age_ms == 8_000
    assert summary("CompleteCommit").age_ms is None


def test_state_sets_are_plain_strings_in_order():
    from txn_broker.states import state_sets

    sets = state_sets()
    assert sets["states"] == [s.value for s in TxnState]
    assert sets["open"] == ["Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"]
    assert "Dead" not in sets["listed"] and len(sets["listed"]) == len(TxnState) - 1

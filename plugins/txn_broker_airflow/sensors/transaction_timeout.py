"""``TransactionTimeoutSensor``: aborts timed-out transactions and reaps stale ids until
no transaction blocks readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..hooks.txn_broker import DEFAULT_CONN_ID
from ..triggers.transaction_timeout import TransactionTimeoutTrigger
from ..waiting import blocking_transactions, run_sweeps
from .base import DeferrableBrokerSensor

if TYPE_CHECKING:
    from txn_broker import Broker


class TransactionTimeoutSensor(DeferrableBrokerSensor):
    """Runs the coordinator's sweeps (``abort_expired_transactions``,
    ``complete_prepared_transactions`` and, unless ``expire_transactional_ids=False``,
    ``expire_transactional_ids``) until no open transaction holds back a last stable
    offset: of ``topics`` when given (use it before reading them), else of any partition
    by a transaction past its own timeout (the maintenance sweep). Safe to run any number
    of times, concurrently too. Deferrable by default.

    XCom: ``{"aborted", "completed", "expired_ids", "producer_states_removed", "sweeps"}``
    (what the last check did when it succeeded without deferring; everything the trigger
    did otherwise)."""

    template_fields: Sequence[str] = ("topics", "txn_broker_conn_id")
    ui_color = "#fadbd8"

    def __init__(self, *, topics: list[str] | None = None, expire_transactional_ids: bool = True,
                 txn_broker_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 5.0)
        super().__init__(**kwargs)
        self.topics = list(topics) if topics is not None else None
        self.expire_transactional_ids = expire_transactional_ids
        self.txn_broker_conn_id = txn_broker_conn_id

    def check(self, broker: Broker) -> dict[str, Any] | None:
        done = run_sweeps(broker, self.expire_transactional_ids)
        if done["aborted"] or done["completed"] or done["expired_ids"]:
            self.log.info("sweeps: aborted %s, completed %s, expired ids %s", done["aborted"],
                          done["completed"], done["expired_ids"])
        blocking = blocking_transactions(broker, self.topics)
        if blocking:
            self.log.info("waiting: %d open transaction(s) hold back readers: %s", len(blocking),
                          ", ".join(b["transactional_id"] for b in blocking))
            return None
        return {**done, "sweeps": 1}

    def trigger(self) -> TransactionTimeoutTrigger:
        return TransactionTimeoutTrigger(topics=self.topics, expire_transactional_ids=self.expire_transactional_ids,
                                         txn_broker_conn_id=self.txn_broker_conn_id,
                                         poll_interval=float(self.poke_interval))

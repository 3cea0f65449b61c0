"""``TransactionTimeoutTrigger``: runs the coordinator's sweeps until nothing blocks readers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..waiting import blocking_transactions, merge_sweeps, run_sweeps
from .base import BrokerPollingTrigger

if TYPE_CHECKING:
    from txn_broker import Broker


class TransactionTimeoutTrigger(BrokerPollingTrigger):
    """Each poll runs the sweeps (abort transactions past their timeout, roll forward
    decided ones, expire idle transactional ids), then fires when no open transaction holds
    back a last stable offset: of ``topics`` (open ones of any age: they are either
    committed, aborted or timed out and swept eventually), or, with ``topics`` None, of
    any partition by a transaction past its timeout. The sweeps are idempotent, so a
    trigger that runs twice does no harm.
    Event: ``{"status": "success", "aborted": [...], "completed": [...], "expired_ids":
    [...], "producer_states_removed": n, "sweeps": n}``."""

    def __init__(self, topics: list[str] | None = None, expire_transactional_ids: bool = True,
                 txn_broker_conn_id: str = "txn_broker_default", poll_interval: float = 5.0) -> None:
        super().__init__(txn_broker_conn_id, poll_interval)
        self.topics = list(topics) if topics is not None else None
        self.expire_transactional_ids = bool(expire_transactional_ids)
        self._done: dict[str, Any] = {}
        self._sweeps = 0

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "topics": self.topics, "expire_transactional_ids": self.expire_transactional_ids,
            "txn_broker_conn_id": self.txn_broker_conn_id, "poll_interval": self.poll_interval,
        })

    def check(self, broker: Broker) -> dict[str, Any] | None:
        self._done = merge_sweeps(self._done, run_sweeps(broker, self.expire_transactional_ids))
        self._sweeps += 1
        blocking = blocking_transactions(broker, self.topics)
        if blocking:
            self.log.info("waiting: %d open transaction(s) hold back readers: %s", len(blocking),
                          ", ".join(b["transactional_id"] for b in blocking))
            return None
        return {**self._done, "sweeps": self._sweeps}

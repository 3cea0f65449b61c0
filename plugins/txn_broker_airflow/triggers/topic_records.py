"""``TopicRecordsTrigger``: fires once committed records exist past a group's offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..waiting import committed_records_available
from .base import BrokerPollingTrigger

if TYPE_CHECKING:
    from txn_broker import Broker


class TopicRecordsTrigger(BrokerPollingTrigger):
    """Polls until at least ``min_records`` committed records of ``topics`` lie past
    ``group_id``'s committed offsets (past the log start when ``group_id`` is None).
    Event: ``{"status": "success", "records": n, "topics": [...], "group_id": ...}``."""

    def __init__(self, topics: list[str], group_id: str | None = None, min_records: int = 1,
                 txn_broker_conn_id: str = "txn_broker_default", poll_interval: float = 5.0) -> None:
        super().__init__(txn_broker_conn_id, poll_interval)
        self.topics = list(topics)
        self.group_id = group_id
        self.min_records = int(min_records)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "topics": self.topics, "group_id": self.group_id, "min_records": self.min_records,
            "txn_broker_conn_id": self.txn_broker_conn_id, "poll_interval": self.poll_interval,
        })

    def check(self, broker: Broker) -> dict[str, Any] | None:
        found = committed_records_available(broker, self.topics, self.group_id, self.min_records)
        if found < self.min_records:
            return None
        return {"records": found, "topics": self.topics, "group_id": self.group_id}

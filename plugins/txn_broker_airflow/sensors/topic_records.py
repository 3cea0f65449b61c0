"""``TopicRecordsSensor``: waits until committed records exist past a group's offsets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..hooks.txn_broker import DEFAULT_CONN_ID
from ..triggers.topic_records import TopicRecordsTrigger
from ..waiting import committed_records_available
from .base import DeferrableBrokerSensor

if TYPE_CHECKING:
    from txn_broker import Broker


class TopicRecordsSensor(DeferrableBrokerSensor):
    """Succeeds when at least ``min_records`` committed (``read_committed``) records of
    ``topics`` lie past ``group_id``'s committed offsets (past the log start when
    ``group_id`` is None). Records of open or aborted transactions do not count.
    Deferrable by default. XCom: ``{"records", "topics", "group_id"}``."""

    template_fields: Sequence[str] = ("topics", "group_id", "txn_broker_conn_id")
    ui_color = "#fcf3cf"

    def __init__(self, *, topics: str | list[str], group_id: str | None = None, min_records: int = 1,
                 txn_broker_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 5.0)
        super().__init__(**kwargs)
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.group_id = group_id
        self.min_records = min_records
        self.txn_broker_conn_id = txn_broker_conn_id

    def check(self, broker: Broker) -> dict[str, Any] | None:
        found = committed_records_available(broker, self.topics, self.group_id, self.min_records)
        if found < self.min_records:
            self.log.info("%d of %d committed record(s) past group %s", found, self.min_records, self.group_id)
            return None
        return {"records": found, "topics": self.topics, "group_id": self.group_id}

    def trigger(self) -> TopicRecordsTrigger:
        return TopicRecordsTrigger(topics=self.topics, group_id=self.group_id, min_records=self.min_records,
                                   txn_broker_conn_id=self.txn_broker_conn_id,
                                   poll_interval=float(self.poke_interval))

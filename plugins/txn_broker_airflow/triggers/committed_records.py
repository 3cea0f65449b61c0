"""``CommittedRecordsEventTrigger``: an Airflow 3 event trigger (``BaseEventTrigger``) that
fires when **committed** records appear past a consumer group's committed offsets.

    orders_in = Asset("txn-topic://txn_broker_default/orders_incoming", watchers=[AssetWatcher(
        name="orders_incoming_committed",
        trigger=CommittedRecordsEventTrigger(topics=["orders_incoming"], group_id="orders_events.process"),
    )])

    @dag(schedule=[orders_in], max_active_runs=1)
    ...

Each poll computes, per partition, the range from the group's committed offset (the log
start where it has none), or from the end of the last range this trigger instance already
announced, up to the last stable offset, and keeps the ranges that hold at least one
committed record (read ``read_committed``). If there are any, one event carries them all:

    {"kind": "txn_broker.committed_records", "event_id": "<32 hex>", "group_id": ...,
     "topics": [...], "ranges": [{"topic", "partition", "start", "end"}, ...], "offsets": n}

``event_id`` is a hash of the group and the ranges: the same ranges always give the same
id. Airflow stores the payload in the asset event's ``extra["payload"]``.

The trigger keeps running after an event (event triggers do) and never announces the same
offsets twice in one triggerer process: the next event starts where the last one ended.
After a triggerer restart it starts again from the group's committed offsets, so ranges
whose run has not committed yet are announced again; the run makes that harmless (see
:mod:`txn_broker_airflow.event_ranges`). Records of open transactions (at or past the LSO)
and of aborted ones (never read read_committed) never cause an event.

**Re-announcing.** Airflow's scheduler can leave an asset event unconsumed: a run takes
the events up to the moment the DAG's queue entry was made and deletes the entry, so an
event of the same asset saved between those two steps waits for the asset's next event.
At the end of a stream there is none, and the last ranges would wait until new records
arrive. So when ``reannounce_after`` seconds pass with no new event and with the group's
committed offsets unchanged since the last event, while some announced range is still
above them, the trigger announces again from the group's committed offsets (once per such
quiet period). A run then processes what is left; if a slow run commits it first, the extra
run finds it committed and does nothing. ``reannounce_after=0`` turns this off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from txn_broker import validate_id, validate_topic_name
from txn_broker.errors import TxnBrokerError

from ..event_ranges import OffsetRange, event_payload, find_new_ranges


class CommittedRecordsEventTrigger(BaseEventTrigger):
    """Fires one event per batch of newly committed records on ``topics`` past
    ``group_id``'s committed offsets (see the module docstring).

    ``group_id`` is the consumer group of the task that processes the events (that task
    commits the ranges it processed for this group). Transient (retriable) broker errors
    are logged and polled through; any other broker error ends the trigger with an error
    (Airflow logs it; the asset gets no event)."""

    def __init__(self, topics: list[str], group_id: str, txn_broker_conn_id: str = "txn_broker_default",
                 poll_interval: float = 5.0, reannounce_after: float = 60.0) -> None:
        super().__init__()
        if isinstance(topics, str) or not topics:
            raise ValueError("topics must be a non-empty list of topic names")
        self.topics = [validate_topic_name(t) for t in topics]
        self.group_id = validate_id("group id", group_id)
        self.txn_broker_conn_id = txn_broker_conn_id
        self.poll_interval = float(poll_interval)
        self.reannounce_after = float(reannounce_after)
        if self.reannounce_after < 0:
            raise ValueError("reannounce_after must be 0 (never) or a number of seconds")
        #: (topic, partition) -> end of the last range announced (or skipped) in this process
        self._cursor: dict[tuple[str, int], int] = {}
        #: (topic, partition) -> end of the last range announced in this process (not skipped)
        self._announced: dict[tuple[str, int], int] = {}
        #: the group's committed offsets when the quiet period began, and when it began
        self._quiet: tuple[dict[tuple[str, int], int], float] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "topics": self.topics, "group_id": self.group_id,
            "txn_broker_conn_id": self.txn_broker_conn_id, "poll_interval": self.poll_interval,
            "reannounce_after": self.reannounce_after,
        })

    def poll_once(self, broker: Any) -> dict[str, Any] | None:
        """One poll (synchronous; the triggerer runs it in a thread): the payload of the next
        event, or None. Advances the cursor past what it announces."""
        from txn_broker.errors import UnknownTopicOrPartitionError

        try:
            ranges = find_new_ranges(broker, self.topics, self.group_id, self._cursor)
        except UnknownTopicOrPartitionError as error:  # not created yet: nothing committed there
            self.log.info("waiting for the topics to exist: %s", error)
            return None
        if not ranges and self.reannounce_after > 0 and self._announced:
            ranges = self._reannounce(broker)
        if not ranges:
            return None
        for r in ranges:
            self._cursor[r.tp] = self._announced[r.tp] = r.end
        self._quiet = None
        return event_payload(self.group_id, self.topics, ranges)

    def _reannounce(self, broker: Any) -> list[OffsetRange]:
        """The ranges to announce again (module docstring, "Re-announcing"), or none. The
        quiet period starts at the first poll after an event that finds nothing new, and
        starts again whenever the group's committed offsets move."""
        from txn_broker import TopicPartition

        now = time.monotonic()
        partitions = [TopicPartition(t, p) for t, p in self._announced]
        committed = {(tp.topic, tp.partition): offset or 0
                     for tp, offset in broker.committed_offsets(self.group_id, partitions).items()}
        for tp, end in list(self._announced.items()):
            if committed.get(tp, 0) >= end:  # processed: nothing to watch there any more
                del self._announced[tp]
                committed.pop(tp, None)
        if not self._announced:
            self._quiet = None
            return []
        if self._quiet is None or self._quiet[0] != committed:
            self._quiet = (committed, now)
            return []
        if now - self._quiet[1] < self.reannounce_after:
            return []
        behind = list(self._announced)  # every range left is still above the group's offset
        self._quiet = (committed, now)  # at most once per quiet period
        for tp in behind:
            self._cursor.pop(tp, None)
        ranges = find_new_ranges(broker, self.topics, self.group_id, self._cursor)
        if ranges:
            self.log.warning("no run has committed %s for %.0f s since they were announced: announcing again from "
                             "the group's committed offsets", ", ".join(f"{t}-{p}" for t, p in behind),
                             self.reannounce_after)
        return ranges

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from ..hooks.txn_broker import TxnBrokerHook

        hook = TxnBrokerHook(self.txn_broker_conn_id)
        try:
            while True:
                try:
                    broker = await asyncio.to_thread(hook.get_conn)
                    payload = await asyncio.to_thread(self.poll_once, broker)
                except TxnBrokerError as error:
                    if not error.retriable:
                        raise
                    self.log.warning("transient broker error, polling on: %s", error)
                    payload = None
                if payload is not None:
                    self.log.info("committed records on %s: event %s, ranges %s", ", ".join(self.topics),
                                  payload["event_id"], payload["ranges"])
                    yield TriggerEvent(payload)
                else:
                    await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(hook.close)

"""Reprocessing from a point in time: a stage's group reset to the offsets at a timestamp
(Kafka's ``--to-datetime``), done by the task itself, once per task instance.

Stages read from their group's committed offsets, not by date, so re-running a past logical
date processes nothing new. ``TransactionalSparkOperator(reprocess_from=...)`` (templated;
empty means no reset) moves the group back first: on every input partition, to the first
offset whose record is at or after that time (``Broker.offsets_for_times``), then the stage
runs as usual from there up to the end offsets it fixes.

Exactly once across retries: the reset is a transaction of the stage's own transactional id
(so it fences any earlier try first) that commits the group's new offsets together with a
marker group named after the task instance and the time. A retry of the same task instance
finds the marker and does not reset again: it goes on from wherever the earlier try left
the group (reset, or reset and processed).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txn_broker import Broker, TopicPartition

log = logging.getLogger(__name__)

MARKER_GROUP_PREFIX = "txn_broker.reprocess."


def reprocess_marker_group(identity: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return MARKER_GROUP_PREFIX + digest[:40]


def reset_group_to_time(broker: Broker, *, transactional_id: str, group_id: str, inputs: list[str],
                        timestamp_ms: int, identity: dict[str, Any],
                        transaction_timeout_ms: int | None = None) -> dict[str, int] | None:
    """Move ``group_id`` on every partition of ``inputs`` to the offsets at ``timestamp_ms``
    in one transaction of ``transactional_id``, with a marker for ``identity`` (the task
    instance). Returns ``{"topic-partition": offset}``, or None when this task instance
    reset already (an earlier try)."""
    from txn_broker import TopicPartition

    partitions: list[TopicPartition] = [TopicPartition(t, p.partition) for t in inputs
                                        for p in broker.describe_topic(t).partitions]
    marker = reprocess_marker_group({**identity, "group_id": group_id, "timestamp_ms": timestamp_ms})
    producer = broker.producer(transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms)
    try:
        producer.init_transactions()  # fences an earlier try; settles what it left
        if any(o is not None for o in broker.committed_offsets(marker, partitions).values()):
            log.info("group %s was reset to %d by an earlier try of this task: not again", group_id, timestamp_ms)
            return None
        offsets = broker.offsets_for_times(partitions, timestamp_ms)
        with producer.transaction():
            producer.send_offsets_to_transaction(offsets, group_id)
            producer.send_offsets_to_transaction(offsets, marker)
    finally:
        producer.close()
    return {f"{tp.topic}-{tp.partition}": o for tp, o in offsets.items()}

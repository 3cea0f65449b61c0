"""``reprocess_from``'s reset (issue 28, finding 4): the stage's group moves to the offsets
at a time in one transaction of the stage's transactional id, with a marker for the task
instance, so a retry of the same run does not reset again (it would reprocess twice), and
another run does."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from txn_broker_airflow.reprocessing import MARKER_GROUP_PREFIX, reset_group_to_time

from txn_broker import TopicPartition

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


def test_reset_once_per_task_instance(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.connect() as broker:
        broker.create_topic("events", partitions=1, schema=pa.schema([("n", pa.int64())]))
        producer = broker.producer()
        producer.send("events", [{"n": i} for i in range(3)])
        producer.flush()
        time.sleep(0.05)
        cut = int(time.time() * 1000)
        time.sleep(0.05)
        producer.send("events", [{"n": i} for i in range(3, 5)])
        producer.flush()
        tp = TopicPartition("events", 0)
        broker.commit_offsets("d.stage", {tp: 5})  # the stage has read everything

        run = {"dag_id": "d", "task_id": "stage", "run_id": "r1", "map_index": -1}
        args = dict(transactional_id="d.stage", group_id="d.stage", inputs=["events"], timestamp_ms=cut)
        assert reset_group_to_time(broker, identity=run, **args) == {"events-0": 3}
        assert broker.committed_offsets("d.stage", [tp]) == {tp: 3}
        broker.commit_offsets("d.stage", {tp: 5})  # as if the first try processed, committed, then died
        assert reset_group_to_time(broker, identity=run, **args) is None  # its retry: no second reset
        assert broker.committed_offsets("d.stage", [tp]) == {tp: 5}
        # a new run reprocesses again; the marker groups are the broker's own
        assert reset_group_to_time(broker, identity={**run, "run_id": "r2"}, **args) == {"events-0": 3}
        assert sum(g.startswith(MARKER_GROUP_PREFIX) for g in broker.list_groups()) == 2
        txn = broker.describe_transaction("d.stage")
        assert txn.transactions[0]["outcome"] == "COMMIT"

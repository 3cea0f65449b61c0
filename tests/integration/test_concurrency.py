"""Many OS processes appending to the same partition at once."""

from __future__ import annotations

import pytest
from _procs import run_all, start

from txn_broker import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def read_all(broker, topic, isolation="read_committed"):
    consumer = broker.consumer(isolation_level=isolation)
    consumer.subscribe([topic])
    rows = []
    while batch := consumer.poll(max_records=10_000).to_pylist():
        rows += batch
    return rows


def test_eight_processes_one_partition(backend):
    broker = backend.connect()
    broker.create_topic("t")
    procs = [start(backend, "produce", "t", 25, f"w{i}") for i in range(8)]
    run_all(procs)
    rows = read_all(broker, "t")
    offsets = [r["_offset"] for r in rows]
    assert offsets == list(range(200))  # contiguous from 0, nothing lost or doubled
    keys = [r["key"] for r in rows]
    assert sorted(keys) == sorted(f"w{i}-{j}".encode() for i in range(8) for j in range(25))
    for i in range(8):  # each producer's records keep their order
        mine = [k for k in keys if k.startswith(f"w{i}-".encode())]
        assert mine == [f"w{i}-{j}".encode() for j in range(25)]
    assert broker.describe_topic("t").partitions[0].high_watermark == 200
    assert TopicPartition("t", 0) in broker.end_offsets([TopicPartition("t", 0)])

"""Multi-process transactional workloads: an exactly-once copier under SIGKILL, 16
concurrent transactional producers, and concurrent sweeps."""

from __future__ import annotations

import json
import time

import pytest
from _procs import run_all, start

from txn_broker import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def read_all(broker, topics, isolation="read_committed"):
    consumer = broker.consumer(isolation_level=isolation)
    consumer.subscribe(topics)
    rows = []
    while batch := consumer.poll(max_records=10_000).to_pylist():
        rows += batch
    return rows


def test_copier_is_exactly_once_under_sigkill(backend):
    broker = backend.connect()
    broker.create_topic("in", partitions=4)
    broker.create_topic("out", partitions=4)
    seed = broker.producer()
    for i in range(300):
        seed.send("in", [{"key": f"k{i}".encode(), "value": f"v{i}".encode()}], key="key")
    seed.flush()
    kills = 0
    for attempt in range(80):
        # die at random fault points, including between the steps of a commit
        faults = {"TXN_BROKER_FAULTS_KILL_RATE": "0.04", "TXN_BROKER_FAULTS_SEED": str(attempt)}
        proc = start(backend, "copier", "in", "out", "copy", "copier-1", 15,
                     extra_env=faults if attempt < 60 else None)
        out, err = proc.communicate(timeout=120)
        if proc.returncode == 0 and "done" in out:
            break
        assert proc.returncode == -9, err[-2000:]
        kills += 1
    else:
        pytest.fail("the copier never finished")
    assert kills > 0, "no crash happened; the test proved nothing"
    broker.complete_prepared_transactions()
    out_rows = read_all(broker, ["out"])
    values = sorted(r["value"] for r in out_rows)
    assert values == sorted(f"v{i}!".encode() for i in range(300))  # each exactly once
    ends = broker.end_offsets([TopicPartition("in", p) for p in range(4)])
    consumer = broker.consumer(group_id="copy")
    assert consumer.committed(list(ends)) == ends
    history = broker.describe_transaction("copier-1")
    assert history.state in ("Empty", "CompleteCommit", "CompleteAbort")


def test_sixteen_transactional_producers(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=4)
    procs = [start(backend, "txn-produce", "t", 4, 6, f"w{i}") for i in range(16)]
    run_all(procs, timeout=300)
    committed = read_all(broker, ["t"])
    everything = read_all(broker, ["t"], "read_uncommitted")
    assert len(committed) == len(everything) == 16 * 6 * 2
    for p in range(4):  # offsets contiguous from 0 in every partition
        offsets = [r["_offset"] for r in committed if r["_partition"] == p]
        assert offsets == list(range(len(offsets)))
    by_txn = {}
    for r in committed:
        by_txn.setdefault(r["key"], []).append(r["_partition"])
    assert len(by_txn) == 16 * 6
    assert all(len(parts) == 2 and parts[0] != parts[1] for parts in by_txn.values())  # none torn
    for info in broker.describe_topic("t").partitions:
        assert info.last_stable_offset == info.high_watermark


def test_two_sweepers_abort_each_transaction_once(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2)
    producers = []
    for i in range(12):
        p = broker.producer(transactional_id=f"hung-{i}", transaction_timeout_ms=100)
        p.init_transactions()
        p.begin_transaction()
        p.send("t", [{"key": b"k", "value": b"v"}], partition=i % 2)
        p.flush()
        producers.append(p)
    time.sleep(0.2)
    outs = run_all([start(backend, "sweep", 3) for _ in range(2)])
    actions = [a for o in outs for a in json.loads(o)]
    fenced = [tid for tid, action in actions if action == "aborted"]
    assert sorted(fenced) == sorted(f"hung-{i}" for i in range(12))  # each fenced once
    for i in range(12):  # and aborted once: one ABORT marker, one CompleteAbort
        history = [h.to_state for h in broker.describe_transaction(f"hung-{i}").history]
        assert history.count("CompleteAbort") == 1 and history.count("PrepareEpochFence") == 1
    states = {t.transactional_id: t.state for t in broker.list_transactions()}
    assert set(states.values()) == {"CompleteAbort"}
    assert read_all(broker, ["t"]) == []
    for info in broker.describe_topic("t").partitions:
        assert info.last_stable_offset == info.high_watermark == 6
    for p in producers:
        assert p.epoch is not None

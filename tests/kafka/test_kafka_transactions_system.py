"""Kafka's transactions system test (tests/kafkatest/tests/core/transactions_test.py in
Apache Kafka), ported: an input topic, transactional copiers (confluent-kafka processes)
killed with SIGKILL at random and restarted with the same transactional ids, and a
read_committed verifying consumer: the output equals the input, nothing duplicated, nothing
lost. Both backends."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COPIER = Path(__file__).with_name("kafka_copier.py")
PARTITIONS = 2
PER_PARTITION = 300
KILLS = 4


def start_copier(bootstrap: str, partition: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(COPIER), bootstrap, f"copier-{partition}", str(partition),
                             str(PER_PARTITION), "0.15"], stdout=open(log, "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            start_new_session=True)


def test_copiers_killed_with_sigkill_lose_and_duplicate_nothing(kafka, backend, tmp_path):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_topics([NewTopic("input", PARTITIONS), NewTopic("output", PARTITIONS)]).values():
        future.result(15)
    seed = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    expected = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{p}-{i}".encode()
            seed.produce("input", value=value, partition=p)
            expected.append(value)
    assert seed.flush(30) == 0

    rng = random.Random(int(os.environ.get("KAFKA_SYSTEM_SEED", "16")))
    logs = {p: tmp_path / f"copier-{p}.log" for p in range(PARTITIONS)}
    copiers = {p: start_copier(kafka.bootstrap, p, logs[p]) for p in range(PARTITIONS)}
    kills = 0
    try:
        for _ in range(KILLS):
            running = [p for p, proc in copiers.items() if proc.poll() is None]
            if not running:
                break
            victim = rng.choice(running)
            # kill the victim inside a transaction: once it stored records it has not committed
            seen = logs[victim].read_text().count("uncommitted")
            deadline = time.monotonic() + 60
            while logs[victim].read_text().count("uncommitted") == seen and copiers[victim].poll() is None:
                assert time.monotonic() < deadline, logs[victim].read_text()
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.05))
            if copiers[victim].poll() is None:
                os.killpg(copiers[victim].pid, signal.SIGKILL)
                copiers[victim].wait(10)
                kills += 1
                with open(logs[victim], "a") as log:
                    log.write("killed\n")
                copiers[victim] = start_copier(kafka.bootstrap, victim, logs[victim])
        for p, proc in copiers.items():
            assert proc.wait(150) == 0, logs[p].read_text()
    finally:
        for proc in copiers.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    assert kills >= KILLS - 1, kills

    verifier = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "verifier",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    verifier.assign([TopicPartition("output", p, 0) for p in range(PARTITIONS)])
    got = []
    quiet = time.monotonic() + 30
    while time.monotonic() < quiet:
        m = verifier.poll(0.5)
        if m is None:
            if len(got) >= len(expected):
                break
            continue
        assert not m.error(), m.error()
        got.append(m.value())
    verifier.close()
    assert len(got) == len(set(got)), "duplicates in the output"
    assert sorted(got) == sorted(expected)
    # the killed transactions' records are in the log, aborted: read_committed skipped them
    broker = backend.connect()
    stored = sum(p.high_watermark for p in broker.describe_topic("output").partitions)
    broker.close()
    assert stored > len(expected), "no kill landed inside a transaction"

"""Worker processes for the multi-process tests. Run as a script with the backend's env:

    python tests/integration/_workers.py produce TOPIC N WORKER_ID
    python tests/integration/_workers.py txn-produce TOPIC PARTITIONS N WORKER_ID
    python tests/integration/_workers.py copier IN OUT GROUP TXN_ID BATCH
    python tests/integration/_workers.py sweep ROUNDS
"""

from __future__ import annotations

import json
import random
import sys

import txn_broker
from txn_broker import TopicPartition


def produce(topic: str, n: int, worker: str) -> None:
    broker = txn_broker.connect()
    producer = broker.producer()
    for i in range(n):
        producer.send(topic, [{"key": f"{worker}-{i}".encode(), "value": b"x"}], partition=0)
        producer.flush()
    producer.close()


def txn_produce(topic: str, partitions: int, n: int, worker: str) -> None:
    """n transactions, each writing one record to each of 2 random partitions."""
    broker = txn_broker.connect()
    producer = broker.producer(transactional_id=f"tp-{worker}")
    producer.init_transactions()
    rng = random.Random(worker)
    for i in range(n):
        with producer.transaction():
            for p in rng.sample(range(partitions), 2):
                producer.send(topic, [{"key": f"{worker}-{i}".encode(), "value": str(p).encode()}],
                              partition=p)
    producer.close()


def copier(src: str, dst: str, group: str, txn_id: str, batch: int) -> None:
    """Consume, transform, produce and send offsets until the input is exhausted."""
    broker = txn_broker.connect()
    producer = broker.producer(transactional_id=txn_id, transaction_timeout_ms=10_000)
    producer.init_transactions()
    consumer = broker.consumer(group_id=group)
    consumer.subscribe([src])
    while True:
        table = consumer.poll(max_records=batch)
        if table.num_rows == 0:
            break
        producer.begin_transaction()
        rows = [{"key": r["key"], "value": r["value"] + b"!"} for r in table.to_pylist()]
        producer.send(dst, rows, key="key")
        offsets = {}
        for r in table.select(["_topic", "_partition", "_offset"]).to_pylist():
            tp = TopicPartition(r["_topic"], r["_partition"])
            offsets[tp] = max(offsets.get(tp, 0), r["_offset"] + 1)
        producer.send_offsets_to_transaction(offsets, group)
        producer.commit_transaction()
    print(json.dumps({"done": True}))


def sweep(rounds: int) -> None:
    broker = txn_broker.connect()
    done = []
    for _ in range(rounds):
        done += [[a.transactional_id, a.action] for a in broker.abort_expired_transactions()]
        done += [[a.transactional_id, a.action] for a in broker.complete_prepared_transactions()]
    print(json.dumps(done))


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "produce":
        produce(args[0], int(args[1]), args[2])
    elif cmd == "txn-produce":
        txn_produce(args[0], int(args[1]), int(args[2]), args[3])
    elif cmd == "copier":
        copier(args[0], args[1], args[2], args[3], int(args[4]))
    elif cmd == "sweep":
        sweep(int(args[0]))
    else:
        raise SystemExit(f"unknown worker {cmd}")

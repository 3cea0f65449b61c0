"""A transactional copier in a consumer group, shaped like librdkafka's transactions example
(examples/transactions.c): it subscribes to ``input`` in the group ``copiers``
(read_committed), and copies each chunk of records to the same partition of ``output`` in one
transaction that also commits the input offsets (send_offsets_to_transaction with the group's
metadata, so a copier that lost its partitions in a rebalance is fenced: KIP-447). A
transaction that fails abortably is aborted and the consumer rewound to the committed
offsets; a retriable commit is retried. Exits 0 once the file END_FILE holds the input's end
offset (written once the input is complete) and the group's committed offsets reach it on
every input partition. Run as
``python kafka_group_copier.py BOOTSTRAPS TXN_ID PARTITIONS END_FILE PACE`` (PACE: seconds
each transaction holds its stored records before it commits)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

#: short timeouts so that a dead or stopped listener is left quickly
SESSION_TIMEOUT_MS = 6000


def log(line: str) -> None:
    print(f"{time.monotonic():.2f} {line}", flush=True)


def rewind(consumer: Consumer) -> None:
    """Back to the group's committed offsets (the aborted transaction's records are read again)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    while True:  # the group's coordinator may be the listener that is down: ask again
        try:
            committed = consumer.committed(assignment, 10)
            break
        except KafkaException as e:
            log(f"committed retried: {e}")
    log(f"rewound to {' '.join(f'{tp.partition}:{tp.offset}' for tp in committed)}")
    for tp in committed:
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def done(consumer: Consumer, partitions: int, end_file: Path) -> bool:
    if not end_file.exists():
        return False
    end = int(end_file.read_text())
    try:
        committed = consumer.committed([TopicPartition("input", p) for p in range(partitions)], 10)
    except KafkaException:
        return False
    return all(tp.offset >= end for tp in committed)


def copy_once(producer: Producer, consumer: Consumer, messages: list, pace: float) -> str:
    """Copy ``messages`` in one transaction: what it copied and the offsets it committed."""
    producer.begin_transaction()
    for m in messages:
        producer.produce("output", key=m.key(), value=m.value(), partition=m.partition())
    producer.flush(20)
    time.sleep(pace)  # the records are stored, uncommitted: a listener's death often lands here
    positions = consumer.position(consumer.assignment())
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 20)
    spans: dict[int, list[int]] = {}
    for m in messages:
        spans.setdefault(m.partition(), []).append(m.offset())
    copied = " ".join(f"{p}:{min(o)}-{max(o)}" for p, o in sorted(spans.items()))
    offsets = " ".join(f"{tp.partition}:{tp.offset}" for tp in sorted(positions, key=lambda tp: tp.partition))
    while True:
        try:
            producer.commit_transaction(20)
            return f"{copied} offsets {offsets}"
        except KafkaException as e:
            if not e.args[0].retriable():
                raise
            log(f"commit retried: {e}")


def abort(producer: Producer) -> None:
    while True:
        try:
            producer.abort_transaction(20)
            return
        except KafkaException as e:
            if not e.args[0].retriable():
                raise
            log(f"abort retried: {e}")


def main(bootstraps: str, transactional_id: str, partitions: int, end_file: Path, pace: float) -> int:
    producer = Producer({"bootstrap.servers": bootstraps, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 20000, "linger.ms": 5, "socket.timeout.ms": 5000,
                         "reconnect.backoff.max.ms": 500})
    producer.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": bootstraps, "group.id": "copiers",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
                         "heartbeat.interval.ms": 500, "max.poll.interval.ms": 20000,
                         "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 500,
                         "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe(["input"], on_assign=lambda c, ps: log(f"assigned {[p.partition for p in ps]}"),
                       on_revoke=lambda c, ps: log(f"revoked {[p.partition for p in ps]}"))
    idle_since = time.monotonic()
    while True:
        messages = [m for m in consumer.consume(10, 0.5) if not m.error()]
        if not messages:
            if time.monotonic() - idle_since > 1.0 and done(consumer, partitions, end_file):
                consumer.close()
                log("done")
                return 0
            continue
        idle_since = time.monotonic()
        try:
            copied = copy_once(producer, consumer, messages, pace)
            log(f"committed {len(messages)}: {copied}")
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if error.fatal():
                log(f"fatal: {error}")
                return 1
            log(f"aborted: {error}")
            abort(producer)
            rewind(consumer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), float(sys.argv[5])))

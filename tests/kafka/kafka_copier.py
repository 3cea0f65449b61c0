"""A transactional copier, as in Kafka's transactions system test: reads one input partition
(read_committed, from the group's committed offset), copies each chunk to the output topic
and commits the input offsets in the same transaction. Exits 0 once the partition's first
``end`` offsets are copied. Each transaction holds its records, stored but uncommitted, for
``pace`` seconds before it commits, so that a kill often lands inside one. Run as
``python kafka_copier.py BOOTSTRAP TXN_ID PARTITION END PACE``."""

from __future__ import annotations

import sys
import time

from confluent_kafka import OFFSET_STORED, Consumer, KafkaException, Producer, TopicPartition


def main(bootstrap: str, transactional_id: str, partition: int, end: int, pace: float) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 30000, "linger.ms": 5})
    producer.init_transactions(30)  # fences a killed predecessor and aborts what it left open
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "copiers", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    tp = TopicPartition("input", partition, OFFSET_STORED)
    consumer.assign([tp])
    position = None
    while True:
        messages = consumer.consume(10, 1.0)  # small transactions: more of them to be killed in
        for m in messages:
            if m.error():
                raise KafkaException(m.error())
        if messages:
            producer.begin_transaction()
            for m in messages:
                producer.produce("output", key=m.key(), value=m.value(), partition=partition)
            producer.flush(30)
            print(f"stored {len(messages)} uncommitted", flush=True)
            time.sleep(pace)
            position = messages[-1].offset() + 1
            producer.send_offsets_to_transaction([TopicPartition("input", partition, position)],
                                                 consumer.consumer_group_metadata())
            producer.commit_transaction(30)
            print(f"committed up to {position}", flush=True)
        if position is None:
            committed = consumer.committed([TopicPartition("input", partition)], 10)[0].offset
            position = committed if committed >= 0 else None
        if position is not None and position >= end:
            consumer.close()
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])))

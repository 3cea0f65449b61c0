"""One confluent-kafka (librdkafka) transactional producer in its own process (case 9's
many-producer shape). Run by the benchmark as

    python -m bench.kafka_producer_worker BOOTSTRAP TOPIC PARTITION TRANSACTIONAL_ID DURATION_S RECORDS RECORD_BYTES

with librdkafka's defaults for ``batch.size`` and ``linger.ms``. Same protocol on
stdin/stdout as :mod:`bench.producer_worker`: it initialises and commits one warm-up
transaction, prints ``ready``, reads the start time, commits transactions of ``RECORDS``
records (one ``produce()`` each) until ``DURATION_S`` later, and prints one JSON line."""

from __future__ import annotations

import json
import os
import sys

from confluent_kafka import Producer

from .producer_worker import timed_window


def main(argv: list[str]) -> int:
    bootstrap, topic, partition, transactional_id = argv[0], argv[1], int(argv[2]), argv[3]
    duration, records, record_bytes = float(argv[4]), int(argv[5]), int(argv[6])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(60)
    values = [os.urandom(record_bytes - 16) for _ in range(records)]
    counter = 0

    def commit() -> None:
        nonlocal counter
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, key=b"%016d" % counter, partition=partition)
            counter += 1
        producer.commit_transaction(60)

    commit()  # warm-up
    result = timed_window(commit, duration)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

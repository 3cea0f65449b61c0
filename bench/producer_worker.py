"""One transactional producer in its own process (case 7). Run by the benchmark as

    python -m bench.producer_worker TOPIC PARTITION TRANSACTIONAL_ID DURATION_S RECORDS RECORD_BYTES

with the backend's ``TXN_BROKER_*`` environment. Protocol on stdin/stdout: it connects,
initialises and commits one warm-up transaction, prints ``ready``, reads a wall-clock
start time (seconds since the epoch) from stdin, commits transactions from then until
``DURATION_S`` later, and prints one JSON line: the commits it completed in that window
and their latencies."""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable

import txn_broker

from . import data


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed_window(step: Callable[[], None], duration: float) -> dict:
    """Say ``ready``, read the start time from stdin, run ``step`` back to back from then
    until ``duration`` seconds later: the steps completed in the window, their latencies
    and the process's CPU seconds (the protocol of the module docstring, which
    ``bench.pg_shape_worker`` shares)."""
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(start_at - time.time(), 0))
    end_at = start_at + duration
    latencies = []
    cpu_start = _cpu()
    while True:
        begin = time.time()
        if begin >= end_at:
            break
        step()
        done = time.time()
        if done <= end_at:
            latencies.append(done - begin)
    return {"commits": len(latencies), "latencies_s": latencies, "cpu_s": _cpu() - cpu_start}


def main(argv: list[str]) -> int:
    topic, partition, transactional_id = argv[0], int(argv[1]), argv[2]
    duration, records, record_bytes = float(argv[3]), int(argv[4]), int(argv[5])
    batch = data.records(records, record_bytes, seed=partition)
    broker = txn_broker.connect()
    producer = broker.producer(transactional_id=transactional_id)
    producer.init_transactions()

    def commit() -> None:
        with producer.transaction():
            producer.send(topic, batch, partition=partition)

    commit()  # warm-up
    result = timed_window(commit, duration)
    producer.close()
    broker.close()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

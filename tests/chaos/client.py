"""One chaos client process: a workload role that runs until told to stop and writes its
history (``history.py``). Started, SIGKILLed, paused and restarted by the runner:

    python -m chaos.client ROLE SLOT --history FILE --stop FILE --ready DIR --seed N [--drain]

It runs until the ``--stop`` file exists (``--drain``: a copier runs until it caught up),
and once connected and initialised creates a file in ``--ready``.

Roles: ``txn-producer`` (transactions over the queue topic, some aborted on purpose),
``producer`` (plain idempotent sends), ``feeder`` (transactions into the copier's input),
``transfer`` (moves an amount between accounts on different partitions), ``copier``
(consume, transform, produce and send offsets, exactly once), ``poller-rc`` and
``poller-ru`` (read every topic at read_committed / read_uncommitted), ``sweeper`` (the
coordinator's sweeps, concurrently with live producers).

A client handles errors as an application should: a retriable error is retried; when it
cannot tell whether a transaction committed, it records the outcome as unknown and exits
(the runner restarts it, and the restart's init_transactions finishes what was left).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from chaos.history import History

import txn_broker
from txn_broker import TopicPartition
from txn_broker.errors import TxnBrokerError

T = TypeVar("T")
QUEUE, BANK, COPY_IN, COPY_OUT = "queue", "bank", "copy-in", "copy-out"
TOPICS = (QUEUE, BANK, COPY_IN, COPY_OUT)
PARTITIONS = 4
ACCOUNTS = 8
COPY_GROUP, COPY_SUFFIX = "copier", "|c@"
TXN_TIMEOUT_MS = int(os.environ.get("CHAOS_TXN_TIMEOUT_MS", "10000"))
EXIT_UNKNOWN = 3  # an outcome became unknown; restart me
RETRY_S = 60  # how long a client retries a retriable error before it gives up


class Client:
    def __init__(self, role: str, slot: int, history: History, stop: Path, ready: Path | None, seed: int,
                 drain: bool) -> None:
        self.role, self.slot, self.history, self.stop, self.drain = role, slot, history, stop, drain
        self.ready_dir = ready
        self.rng = random.Random(f"{seed}-{role}-{slot}-{os.getpid()}")
        self.name = f"{role}{slot}.{os.getpid()}"
        self.counter = 0
        self.broker = retry_until(lambda: txn_broker.connect(), time.time() + RETRY_S)

    def next_id(self) -> str:
        self.counter += 1
        return f"{self.name}.{self.counter}"

    def alive(self) -> bool:
        return self.drain or not self.stop.exists()

    def ready(self) -> None:
        if self.ready_dir is not None:
            (self.ready_dir / f"{self.role}{self.slot}.{os.getpid()}").touch()

    def pace(self) -> None:
        time.sleep(self.rng.uniform(0.01, 0.06))

    # -- transactional writers -----------------------------------------------------------

    def transactional(self, tid: str) -> Any:
        producer = self.broker.producer(transactional_id=tid, transaction_timeout_ms=TXN_TIMEOUT_MS)
        retry_until(producer.init_transactions, time.time() + RETRY_S)
        self.ready()
        return producer

    def run_txn(self, producer: Any, op_id: str, writes: list[list[Any]], kind: str,
                reads: list[list[Any]] | None = None, offsets: list[list[Any]] | None = None,
                abort: bool = False) -> bool:
        """One transaction; returns False when it aborted (on purpose or not)."""
        self.history.invoke("txn", op_id, writes, kind=kind, reads=reads or [], offsets=offsets or [])
        try:
            producer.begin_transaction()
            by_partition: dict[tuple[str, int], list[str]] = defaultdict(list)
            for w in writes:
                by_partition[(w[0], w[1])].append(w[2])
            for (topic, partition), values in by_partition.items():
                producer.send(topic, [{"key": v.encode(), "value": v.encode()} for v in values],
                              partition=partition)
            if offsets:
                producer.send_offsets_to_transaction(
                    {TopicPartition(t, p): o for _g, t, p, o in offsets}, offsets[0][0])
        except TxnBrokerError as error:
            time.sleep(0.2)  # back off before the abort: the database may be down
            return self.abort(producer, op_id, f"{type(error).__name__}: {error}")
        if abort:
            return self.abort(producer, op_id, "aborted on purpose")
        deadline = time.time() + 60
        while True:
            try:
                appends = producer.commit_transaction()
                break
            except TxnBrokerError as error:
                if error.retriable and time.time() < deadline:
                    time.sleep(0.2)
                    continue
                self.history.info("txn", op_id, f"commit: {type(error).__name__}: {error}")
                sys.exit(EXIT_UNKNOWN)
        self.history.ok("txn", op_id, sent_offsets(writes, appends))
        return True

    def abort(self, producer: Any, op_id: str, why: str) -> bool:
        deadline = time.time() + 60
        while True:
            try:
                producer.abort_transaction()
                self.history.fail("txn", op_id, why)
                return False
            except TxnBrokerError as error:
                if error.retriable and time.time() < deadline:
                    time.sleep(0.2)
                    continue
                self.history.info("txn", op_id, f"{why}; abort: {type(error).__name__}: {error}")
                sys.exit(EXIT_UNKNOWN)

    def txn_producer(self, topic: str = QUEUE) -> None:
        producer = self.transactional(f"chaos-{self.role}-{self.slot}")
        while self.alive():
            op_id = self.next_id()
            parts = self.rng.sample(range(PARTITIONS), self.rng.randint(1, 3))
            writes = [[topic, p, f"{op_id}.{p}.{i}"] for p in parts for i in range(self.rng.randint(1, 2))]
            self.run_txn(producer, op_id, writes, kind=self.role, abort=self.rng.random() < 0.15)
            self.pace()

    def transfer(self) -> None:
        producer = self.transactional(f"chaos-transfer-{self.slot}")
        while self.alive():
            op_id = self.next_id()
            src = self.rng.randrange(ACCOUNTS)
            dst = self.rng.choice([a for a in range(ACCOUNTS) if a % PARTITIONS != src % PARTITIONS])
            amount = self.rng.randint(1, 100)
            writes = [[BANK, src % PARTITIONS, f"{op_id}.debit.{src}", -amount],
                      [BANK, dst % PARTITIONS, f"{op_id}.credit.{dst}", amount]]
            self.run_txn(producer, op_id, writes, kind="transfer", abort=self.rng.random() < 0.1)
            self.pace()

    def copier(self) -> None:
        producer = self.transactional(f"chaos-copier-{self.slot}")
        mine = [TopicPartition(COPY_IN, p) for p in range(PARTITIONS) if p % 2 == self.slot % 2]
        consumer = self.broker.consumer(group_id=COPY_GROUP)
        consumer.assign(mine)
        session = self.start_session(consumer, mine)
        idle = 0
        while self.alive():
            try:
                table = consumer.poll(max_records=self.rng.randint(1, 12))
            except TxnBrokerError as error:
                if not error.retriable:
                    raise
                time.sleep(0.2)  # retry the same poll: nothing may have been skipped
                continue
            records = [[r["_topic"], r["_partition"], r["_offset"], r["value"].decode()] for r in table.to_pylist()]
            self.history.poll(session, "read_committed", records)
            if not records:
                idle += 1
                if self.drain and idle >= 3 and self.caught_up(consumer, mine):
                    return
                time.sleep(0.1)
                continue
            idle = 0
            op_id = self.next_id()
            writes = [[COPY_OUT, p, v + COPY_SUFFIX + op_id] for _t, p, _o, v in records]
            ends: dict[int, int] = {}
            for _t, p, o, _v in records:
                ends[p] = max(ends.get(p, 0), o + 1)
            offsets = [[COPY_GROUP, COPY_IN, p, o] for p, o in sorted(ends.items())]
            abort = not self.drain and self.rng.random() < 0.1
            if not self.run_txn(producer, op_id, writes, "copy", reads=records, offsets=offsets, abort=abort):
                committed = retry_until(lambda: consumer.committed(mine), time.time() + RETRY_S)
                for tp in mine:  # rewind to what the group committed, as after a failure
                    consumer.seek(tp, committed[tp] or 0)
                session = self.start_session(consumer, mine)
            self.pace()

    def caught_up(self, consumer: Any, mine: list[TopicPartition]) -> bool:
        ends = self.broker.end_offsets(mine)
        return all(consumer.position(tp) >= ends[tp] for tp in mine)

    # -- plain producer, pollers, sweeper ------------------------------------------------

    def producer(self) -> None:
        producer = self.broker.producer()
        self.ready()
        while self.alive():
            op_id = self.next_id()
            p = self.rng.randrange(PARTITIONS)
            writes = [[QUEUE, p, f"{op_id}.{i}"] for i in range(self.rng.randint(1, 3))]
            self.history.invoke("send", op_id, writes)
            try:
                producer.send(QUEUE, [{"key": w[2].encode(), "value": w[2].encode()} for w in writes],
                              partition=p)
            except TxnBrokerError as error:
                self.history.fail("send", op_id, f"{type(error).__name__}: {error}")  # nothing buffered
                time.sleep(0.2)  # back off: the database may be down
                continue
            try:
                results = retry_until(producer.flush, time.time() + RETRY_S)
            except TxnBrokerError as error:
                self.history.info("send", op_id, f"{type(error).__name__}: {error}")
                sys.exit(EXIT_UNKNOWN)
            self.history.ok("send", op_id, sent_offsets(writes, results))
            self.pace()

    def start_session(self, consumer: Any, tps: list[TopicPartition]) -> str:
        session = self.next_id()
        positions = retry_until(lambda: [[tp.topic, tp.partition, consumer.position(tp)] for tp in tps],
                                time.time() + RETRY_S)
        self.history.assign(session, consumer.isolation_level, positions)
        return session

    def poller(self, isolation: str) -> None:
        consumer = self.broker.consumer(isolation_level=isolation)
        tps = [TopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS)]
        consumer.assign(tps)
        session = self.start_session(consumer, tps)
        self.ready()
        while self.alive():
            try:
                table = consumer.poll(max_records=self.rng.randint(1, 200))
            except TxnBrokerError as error:
                if not error.retriable:
                    raise
                time.sleep(0.2)  # keep the session: the consumer must not have moved on
                continue
            records = [[r["_topic"], r["_partition"], r["_offset"], r["value"].decode()] for r in table.to_pylist()]
            self.history.poll(session, isolation, records)
            time.sleep(0.05)

    def sweeper(self) -> None:
        self.ready()
        while self.alive():
            try:
                self.broker.abort_expired_transactions()
                self.broker.complete_prepared_transactions()
            except TxnBrokerError as error:
                if not error.retriable:
                    raise
            time.sleep(self.rng.uniform(0.1, 0.5))


def sent_offsets(writes: list[list[Any]], appends: list[Any]) -> list[list[Any]]:
    """Each written value's offset: a partition's values were buffered in order and each
    append result covers the next ``record_count`` of them."""
    queues: dict[tuple[str, int], list[str]] = defaultdict(list)
    for w in writes:
        queues[(w[0], w[1])].append(w[2])
    sent = []
    for a in sorted(appends, key=lambda a: (a.topic, a.partition, a.base_offset)):
        values = queues[(a.topic, a.partition)]
        for i in range(a.record_count):
            if values:
                sent.append([a.topic, a.partition, a.base_offset + i, values.pop(0)])
    return sent


def retry_until(call: Callable[[], T], deadline: float) -> T:
    """``call()``, again after each retriable error until ``deadline``."""
    while True:
        try:
            return call()
        except TxnBrokerError as error:
            if not error.retriable or time.time() >= deadline:
                raise
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role")
    parser.add_argument("slot", type=int)
    parser.add_argument("--history", required=True)
    parser.add_argument("--stop", type=Path, required=True)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drain", action="store_true", help="copier: stop once caught up")
    args = parser.parse_args()
    history = History(args.history, process=f"{args.role}{args.slot}.{os.getpid()}")
    client = Client(args.role, args.slot, history, args.stop, args.ready, args.seed, args.drain)
    role = args.role
    if role == "txn-producer":
        client.txn_producer(QUEUE)
    elif role == "feeder":
        client.txn_producer(COPY_IN)
    elif role == "transfer":
        client.transfer()
    elif role == "copier":
        client.copier()
    elif role == "producer":
        client.producer()
    elif role in ("poller-rc", "poller-ru"):
        client.poller("read_committed" if role == "poller-rc" else "read_uncommitted")
    elif role == "sweeper":
        client.sweeper()
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main()

"""Listener failover, on both backends: three `txn-broker serve` processes are one cluster
(one database and storage). An idempotent producer feeds the input at a steady pace; two
transactional copiers in a consumer group (confluent-kafka processes, kafka_group_copier.py:
consume-transform-produce with send_offsets_to_transaction) and a read_committed consumer
group work through the listeners. The listener coordinating the copiers' group is SIGKILLed;
later the next coordinator is SIGSTOPped past the session timeout and the listener expiry,
then resumed: its first answer names the listener that took its group over, and it takes
the group back once its new term settles. The clients move to the
live listeners, the group rebalances each time, and the output topic ends up exactly the
input: every record once, in each partition's order (every transaction committed exactly
once or aborted)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _kafka_listener import Listener, coordinator_of, find_coordinator_frame, read_find_coordinator, wait_for
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from txn_broker.kafka.cluster_view import GUARD_MS, LISTENER_EXPIRY_MS, SETTLE_MS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COPIER = Path(__file__).with_name("kafka_group_copier.py")
PARTITIONS = 4
#: input records per partition and second (the copiers catch up after each stall quickly)
FEED_RATE = 10
#: how long a SIGSTOPped listener stays stopped: past the copiers' session timeout (6 s) and
#: the listener expiry (6 s, then up to a 2 s heartbeat for the others to notice)
STOPPED_S = 9.0


class Feeder:
    """An idempotent producer writing ``{partition}-{i}`` to every input partition at
    FEED_RATE, in a thread, until :meth:`finish`: each record once, in order, through the
    failovers (its retries are the producer's own)."""

    def __init__(self, bootstraps: str) -> None:
        self.count = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstraps, "enable.idempotence": True, "linger.ms": 5,
                                   "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 500,
                                   "topic.metadata.refresh.interval.ms": 1000})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(str(error))

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                self._producer.produce("input", value=f"{p}-{self.count}".encode(), partition=p,
                                       on_delivery=self._delivered)
            self.count += 1
            self._producer.poll(0)
            self._stop.wait(1 / FEED_RATE)

    def finish(self) -> int:
        """Stop, wait until everything is stored, and answer the records per partition."""
        self._stop.set()
        self._thread.join(10)
        assert self._producer.flush(60) == 0
        assert not self.errors, self.errors
        return self.count


class Reader:
    """A read_committed consumer group member polling ``output`` in a thread: what it saw,
    by (partition, offset) (a rebalance may deliver a record again: the group commits
    automatically, at least once)."""

    def __init__(self, bootstraps: str) -> None:
        self.seen: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstraps, "group.id": "readers",
                                   "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                   "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                                   "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 500,
                                   "topic.metadata.refresh.interval.ms": 1000})
        self._consumer.subscribe(["output"])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self._consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                if not m.error().retriable() and m.error().code() != KafkaError._PARTITION_EOF:
                    self.errors.append(str(m.error()))
                continue
            self.seen[(m.partition(), m.offset())] = m.value()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def listener_rows(backend) -> list:  # type: ignore[no-untyped-def]
    """The listeners the database holds now (ListenerRow: the ages of their heartbeat and term)."""
    from txn_broker.kafka.backend import KafkaBackend

    with backend.connect() as broker:
        return KafkaBackend(broker).live_listeners(60_000)


def output_segments(backend, partition: int) -> list[str]:  # type: ignore[no-untyped-def]
    """Who wrote each segment of an output partition (what a duplicate needs to be traced):
    offsets, transaction, transactional id, producer id and epoch, first sequence."""
    import sqlalchemy as sa

    query = sa.text("""
        SELECT s.base_offset, s.record_count, s.txn_id, x.transactional_id, s.producer_id,
               s.producer_epoch, s.base_sequence, s.purged_ms
        FROM segments s JOIN topics t ON t.topic_id = s.topic_id
        LEFT JOIN transactions x ON x.txn_id = s.txn_id
        WHERE t.name = 'output' AND s.partition_no = :p ORDER BY s.base_offset""")
    with backend.connect() as broker:
        rows = broker._db.read(lambda tx: tx._conn.execute(query, {"p": partition}).all())
    return [f"{r[0]}+{r[1]} txn {r[2]} {r[3]} pid {r[4]} epoch {r[5]} seq {r[6]}" + (" purged" if r[7] else "")
            for r in rows]


def describe_rows(rows: list) -> list[str]:
    """What a failed assertion about coordination needs to be understood."""
    return [f"node {r.node.node_id} port {r.node.port}: heartbeat {r.age_ms} ms ago, term {r.term_ms} ms old"
            for r in rows]


def coordinator_port(listeners: list[Listener], group: str) -> int | None:
    """The port of the group's coordinator once every listener names the same (FindCoordinator);
    None until then."""
    answers = set()
    for listener in listeners:
        try:
            answers.add(coordinator_of(listener, group))
        except OSError:
            return None
    if len(answers) != 1:
        return None
    error, port = answers.pop()
    return port if error == 0 else None


def commits(log: Path) -> int:
    return log.read_text().count("committed") if log.exists() else 0


def read_output(bootstraps: str) -> dict[int, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstraps, "group.id": "verifier", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition("output", p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    while len(at_end) < PARTITIONS and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            at_end.add(m.partition())
            continue
        out[m.partition()].append(m.value())
    c.close()
    return out


def describe_difference(got: list[bytes], want: list[bytes]) -> str:
    duplicated = sorted({v for v in got if got.count(v) > 1})
    missing = [v for v in want if v not in got]
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return f"{len(got)} records, duplicated {duplicated}, missing {missing}, first difference at {first}"


def test_listeners_killed_and_stopped_under_transactional_copiers(backend, tmp_path):
    with ThreadPoolExecutor(3) as pool:  # started together; those that started are stopped if one did not
        starting = [pool.submit(Listener, backend.env, tmp_path / f"serve-{i}.log") for i in range(3)]
    if any(f.exception() for f in starting):
        for f in starting:
            if f.exception() is None:
                f.result().stop()
        raise next(f.exception() for f in starting if f.exception())
    listeners = [f.result() for f in starting]
    settled = time.monotonic() + (SETTLE_MS + GUARD_MS) / 1000 + 0.5  # every listener coordinates groups
    bootstraps = ",".join(lst.bootstrap for lst in listeners)
    copiers: list[subprocess.Popen] = []
    stopped: Listener | None = None
    feeder = reader = None
    try:
        admin = AdminClient({"bootstrap.servers": bootstraps})
        for future in admin.create_topics([NewTopic("input", PARTITIONS), NewTopic("output", PARTITIONS)]).values():
            future.result(15)
        feeder = Feeder(bootstraps)
        reader = Reader(bootstraps)
        time.sleep(max(0.0, settled - time.monotonic()))
        logs = [tmp_path / f"copier-{i}.log" for i in range(2)]
        end_file = tmp_path / "end"
        copiers = [subprocess.Popen([sys.executable, str(COPIER), bootstraps, f"copier-{i}", str(PARTITIONS),
                                     str(end_file), "0.05"], stdout=open(logs[i], "wb"),  # noqa: SIM115
                                    stderr=subprocess.STDOUT, start_new_session=True) for i in range(2)]

        def progress(after: int, what: str) -> int:
            wait_for(lambda: sum(commits(log) for log in logs) >= after + 4, timeout=60,
                     what=f"{what}: {[log.read_text() for log in logs]}")
            return sum(commits(log) for log in logs)

        done = progress(0, "copiers under way")
        by_port = {lst.port: lst for lst in listeners}
        victim = by_port[wait_for(lambda: coordinator_port(listeners, "copiers"), what="the group's coordinator")]
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(10)
        live = [lst for lst in listeners if lst is not victim]
        bootstraps_live = ",".join(lst.bootstrap for lst in live)
        port = wait_for(lambda: coordinator_port(live, "copiers") not in {None, victim.port}
                        and coordinator_port(live, "copiers"), what="the group's next coordinator")
        done = progress(done, "copying after a SIGKILL")

        stopped = by_port[port]
        other = next(lst for lst in live if lst is not stopped)
        os.killpg(stopped.proc.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        time.sleep(STOPPED_S)
        with socket.create_connection(("127.0.0.1", stopped.port), timeout=10) as sock:
            sock.sendall(find_coordinator_frame("copiers"))  # the first request it reads once resumed
            os.killpg(stopped.proc.pid, signal.SIGCONT)
            stopped = None
            first_answer = read_find_coordinator(sock)
        # it names the listener that took the group over (or none yet), not itself from the
        # view it had before it stopped: two coordinators of one group would each rebalance it.
        # Itself is right only if the other listener was taken as down meanwhile: its heartbeat
        # is past the expiry, or its term began since the stop (on SQLite a listener stopped
        # inside a write transaction holds the database's lock, and the other listener's
        # heartbeat waits for it)
        rows = listener_rows(backend)
        other_row = next((r for r in rows if r.node.port == other.port), None)
        other_down = other_row is None or other_row.age_ms > LISTENER_EXPIRY_MS \
            or other_row.term_ms < (time.monotonic() - stopped_at) * 1000
        allowed = {(0, other.port), (ErrorCode.coordinator_not_available.value, -1)}
        if other_down:
            allowed.add((0, port))
        assert first_answer in allowed, (first_answer, describe_rows(rows))
        done = progress(done, "copying after a SIGSTOP")
        # the resumed listener takes the group back once its new term settled; copying goes on
        wait_for(lambda: coordinator_port(live, "copiers") == port, timeout=30,
                 what="the group back at the resumed listener")
        done = progress(done, "copying after the group came back")

        end = feeder.finish()
        end_file.write_text(str(end))
        for i, proc in enumerate(copiers):
            assert proc.wait(90) == 0, logs[i].read_text()
        expected = {p: [f"{p}-{i}".encode() for i in range(end)] for p in range(PARTITIONS)}
        output = read_output(bootstraps_live)
        for p, values in expected.items():  # each record once, in order
            assert output[p] == values, (p, describe_difference(output[p], values), output_segments(backend, p),
                                         [log.read_text() for log in logs])
        wait_for(lambda: len(reader.seen) >= PARTITIONS * end, timeout=30, what="the reader group")
        assert sorted(reader.seen.values()) == sorted(v for values in expected.values() for v in values)
        assert not reader.errors, reader.errors
        for lst in listeners:  # a request no listener could answer closed its connection
            assert "Traceback" not in lst.log(), lst.log()
        aborted = sum(log.read_text().count("aborted") for log in logs)
        print(f"{PARTITIONS * end} records, {aborted} transactions aborted")
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(stopped.proc.pid, signal.SIGCONT)
        if reader is not None:
            reader.close()
        if feeder is not None:
            feeder._stop.set()
        for proc in copiers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for lst in listeners:
            lst.stop()

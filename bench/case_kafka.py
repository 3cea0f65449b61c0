"""Case 9: Kafka's own client (confluent-kafka, librdkafka) through ``txn-broker serve``
against the Python API on the same data, in the same run, for idempotent produce,
transactional produce and ``read_committed`` consume. Targets (issue 29): each throughput
≥ 0.8× the case's own "2-core ceiling at these CPU costs" (below), and the listener's CPU
per MB no higher than the Kafka client's own; the throughput ratio to the Python API is
reported. Commit latency p50/p99 through the protocol is reported next to case 4's.

The many-producer shape: 16 confluent-kafka transactional producers, each its own OS
process with librdkafka's default ``batch.size`` and ``linger.ms``, commit transactions of
10 records of 1 KB to their own partition of one topic through the listener for the same
window as 16 Python-API producer processes doing the same (case 7's workers, on a topic of
the Python side's own); target: aggregate commits/s ≥ 0.8× the Python API's.

Data: incompressible 1 KB records (16-byte key, the rest value) in a topic of Kafka's
record shape, one partition. Each variant writes ``kafka_mb`` into a topic of its own:
the Python API as a user writes it (the idempotent producer flushes once at the end, the
transactional one commits every ``txn_mb``), confluent-kafka produces the same records one
``produce()`` call each (as a Kafka application does) with the same transaction size, and
flushes or commits the same way. Consume reads the whole topic at ``read_committed`` with
the Python consumer (polls of the default size, 8 MiB) and with a confluent-kafka consumer
(fetches of the same size, ``consume()`` in batches of 500), both assigned the partition,
until every record has arrived; each run reads a topic written for it (untimed), so that
neither side reads what it has cached, and both read the bytes of every value. The
listener runs in its own process; its start-up is not timed. Next to the wall-time ratios,
the CPU time per MB of the listener and of the process running the Python API or the
Kafka client: less noisy on a shared machine. Two ceilings follow from those: the
Python API's wall time over half the Kafka client's CPU time (the best ratio 2 cores allow
if the listener cost nothing), and over half the client's and listener's CPU time together
(the best ratio 2 cores allow at the measured CPU costs). The Kafka producers use
:data:`THROUGHPUT_CONFIG`, what a user after throughput sets."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from txn_broker.consumer import DEFAULT_POLL_BYTES

from . import data
from .case_concurrency import _run_producers
from .harness import CaseResult, Figure, Target, interleaved, latency_figure, mb, percentiles, throughput_ratio
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, unique

TITLE = "Kafka clients through txn-broker serve vs the Python API"
#: the producer settings a user after throughput sets (docs/kafka-protocol.md, "Performance"):
#: requests of up to 8 MB, the size of the Python API's segments (librdkafka's defaults cap a
#: batch at 1 MB and 10,000 records), a linger long enough to fill them, a queue that holds
#: the data of several requests, no delivery callbacks
THROUGHPUT_CONFIG: dict[str, Any] = {
    "linger.ms": 50, "batch.size": 8_000_000, "batch.num.messages": 100_000, "message.max.bytes": 10_000_000,
    "queue.buffering.max.kbytes": 1_048_576, "queue.buffering.max.messages": 1_000_000}
#: each throughput at least this share of the 2-core ceiling at the measured CPU costs
CEILING_TARGET = Target(">=", 0.8)
#: the listener's CPU per MB over the Kafka client's own
CPU_TARGET = Target("<=", 1.0)
SMALL_TXN_RECORDS = 10
#: the many-producer shape: processes per side, repetitions (alternating sides), its target
MANY_PRODUCERS = 16
MANY_REPS = 3
MANY_TARGET = Target(">=", 0.8)


class Listener:
    """``txn-broker serve`` on a free loopback port, in its own process group."""

    def __init__(self, backend: Backend, log_path: Any) -> None:
        env = {**os.environ, **backend.env, "TXN_BROKER_DATABASE_URL": backend.database_url,
               "TXN_BROKER_STORAGE_URL": backend.storage_url}
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "txn_broker.cli", "serve", "--listen", "127.0.0.1:0"],
                                     env=env, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"txn-broker serve did not start ({line!r}); see {log_path}")
        self.bootstrap = f"127.0.0.1:{match.group(1)}"
        self._profiler: subprocess.Popen[bytes] | None = None
        profile = os.environ.get("BENCH_KAFKA_PROFILE")  # a py-spy speedscope file of the listener
        if profile:
            flags = os.environ.get("BENCH_KAFKA_PROFILE_FLAGS", "").split()  # e.g. --native
            self._profiler = subprocess.Popen(
                ["py-spy", "record", "--pid", str(self.proc.pid), "--format", "speedscope", "--rate", "200", *flags,
                 "-o", profile], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cpu_seconds(self) -> float:
        """CPU time the listener has used so far, every thread (nanoseconds from each
        thread's schedstat: /proc/<pid>/stat counts in 10 ms ticks)."""
        total = 0
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
                continue
        return total / 1e9

    def stop(self) -> None:
        if self._profiler is not None:
            self._profiler.send_signal(signal.SIGINT)
            self._profiler.wait(60)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def _chunks(sizes: Sizes) -> list[pa.Table]:
    return data.record_chunks(sizes.kafka_mb * 1_000_000, sizes.txn_mb * 1_000_000, sizes.record_bytes)


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
    from confluent_kafka import TopicPartition as KafkaPartition

    chunks = _chunks(sizes)
    pairs = [list(zip(c.column("key").to_pylist(), c.column("value").to_pylist(), strict=True)) for c in chunks]
    total = sum(c.num_rows for c in chunks)
    nbytes = sum(c.nbytes for c in chunks)
    result = CaseResult(9, TITLE, backend.name, sizes=(
        f"{mb(nbytes)} per repetition ({total:,} records of {sizes.record_bytes} B, incompressible), transactions "
        f"of {mb(sizes.txn_mb * 1_000_000)}, one partition; {sizes.commit_samples} small commits "
        f"({SMALL_TXN_RECORDS} records) through the protocol"))
    broker = backend.connect()
    listener = Listener(backend, backend.root / f"serve-{unique('c9')}.log")
    topics: list[str] = []
    common = {"bootstrap.servers": listener.bootstrap, **THROUGHPUT_CONFIG}

    def topic() -> str:
        name = unique("c9")
        broker.create_topic(name, partitions=1)  # Kafka's record shape: key, value, headers
        topics.append(name)
        return name

    # the Python API sends the same records with no headers, as the Kafka client does
    warmup = topic()
    headers = broker.describe_topic(warmup).schema.field("headers").type
    chunks = [c.append_column("headers", pa.nulls(c.num_rows, headers)) for c in chunks]

    #: CPU seconds per run of each variant: the listener's (Kafka variants) and this
    #: process's (the Python API, and the Kafka client itself), the warm-up included
    serve_cpu: dict[str, list[float]] = {}
    own_cpu: dict[str, list[float]] = {}

    clock: dict[str, float] = {}

    def started() -> float:
        """The timed part of a run begins: its wall clock and both CPU clocks (what a run
        does before, such as writing the topic a consume run reads, is not counted)."""
        clock.update(serve=listener.cpu_seconds(), own=time.process_time())
        return time.perf_counter()

    def stopped(start: float) -> float:
        clock.update(serve=listener.cpu_seconds() - clock["serve"], own=time.process_time() - clock["own"])
        return time.perf_counter() - start

    def measured(name: str, body: Callable[[], float]) -> Callable[[], float]:
        def run_once() -> float:
            elapsed = body()
            serve_cpu.setdefault(name, []).append(clock["serve"])
            own_cpu.setdefault(name, []).append(clock["own"])
            return elapsed
        return run_once

    def py_idempotent() -> float:
        name, producer = topic(), broker.producer()
        # started before the clock, as the transactional variants are by init_transactions()
        producer.send(warmup, chunks[0].slice(0, 1), partition=0)
        producer.flush()
        start = started()
        for chunk in chunks:
            producer.send(name, chunk, partition=0)
        producer.flush()
        return stopped(start)

    def py_transactional() -> float:
        name, producer = topic(), broker.producer(transactional_id=unique("c9-py"))
        producer.init_transactions()
        start = started()
        for chunk in chunks:
            with producer.transaction():
                producer.send(name, chunk, partition=0)
        elapsed = stopped(start)
        producer.close()
        return elapsed

    def kafka_idempotent() -> float:
        name, producer = topic(), Producer({**common, "enable.idempotence": True})
        # connected and holding its producer id before the clock, as the transactional
        # variants are by init_transactions() (librdkafka otherwise spends about 0.5 s on
        # its start-up timers inside the timed part)
        _produce(producer, warmup, b"warm-up", b"warm-up")
        if producer.flush(30):
            raise RuntimeError("the warm-up record was not delivered through the protocol")
        start = started()
        for chunk in pairs:
            for key, value in chunk:
                _produce(producer, name, key, value)
        remaining = producer.flush(120)
        elapsed = stopped(start)
        if remaining:
            raise RuntimeError(f"{remaining} records not delivered through the protocol")
        return elapsed

    def kafka_transactional() -> float:
        name = topic()
        producer = Producer({**common, "transactional.id": unique("c9-kafka")})
        producer.init_transactions(30)
        start = started()
        for chunk in pairs:
            producer.begin_transaction()
            for key, value in chunk:
                _produce(producer, name, key, value)
            producer.commit_transaction(120)
        return stopped(start)

    def filled() -> str:
        """A topic written (transactionally, untimed) for one consume run. Each run reads
        a topic of its own: the listener keeps decoded segments in memory across
        requests, and a topic read before would be served from there while the Python
        consumer (a new one each run) reads storage."""
        name = topic()
        producer = broker.producer(transactional_id=unique("c9-fill"))
        producer.init_transactions()
        for chunk in chunks:
            with producer.transaction():
                producer.send(name, chunk, partition=0)
        producer.close()
        return name

    def py_consume() -> float:
        name = filled()
        consumer = broker.consumer()
        start = started()
        consumer.subscribe([name])
        seen = 0
        while seen < total:
            got = consumer.poll(timeout_s=5)
            seen += got.num_rows
            _touch(got.column("value"))  # the records are read, as the Kafka client's are
        elapsed = stopped(start)
        consumer.close()
        return elapsed

    def kafka_consume() -> float:
        name = filled()
        consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": unique("c9-g"),
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                             # a fetch of the Python consumer's default poll size (8 MiB)
                             "max.partition.fetch.bytes": DEFAULT_POLL_BYTES})
        # connected to the partition's leader before the clock starts, as the Python API
        # is to its database (librdkafka otherwise waits out a timer of about 0.5 s
        # before its first offset lookup on a connection not yet up)
        consumer.get_watermark_offsets(KafkaPartition(name, 0), timeout=30)
        start = started()
        # assigned, as the Python consumer is: the group's join protocol is not timed
        consumer.assign([KafkaPartition(name, 0, OFFSET_BEGINNING)])
        seen = 0
        deadline = time.monotonic() + 300
        while seen < total and time.monotonic() < deadline:
            # consume() waits for as many messages as asked or its timeout: never ask for
            # more than remain (the last call would otherwise wait out its timeout)
            for message in consumer.consume(min(500, total - seen), 0.5):
                if message.error() is None:
                    seen += 1
        elapsed = stopped(start)
        consumer.close()
        if seen < total:
            raise RuntimeError(f"the Kafka consumer read {seen} of {total} records")
        return elapsed

    try:
        produce = interleaved({
            "py-idempotent": measured("py-idempotent", py_idempotent),
            "kafka-idempotent": measured("kafka-idempotent", kafka_idempotent),
            "py-transactional": measured("py-transactional", py_transactional),
            "kafka-transactional": measured("kafka-transactional", kafka_transactional)},
            sizes.reps, progress=progress)
        consume = interleaved({"py-consume": measured("py-consume", py_consume),
                               "kafka-consume": measured("kafka-consume", kafka_consume)}, sizes.reps,
                              progress=progress)
        latencies = _commit_latencies(Producer, common, topic(), sizes.commit_samples)
        try:
            many = _many_producers(backend, broker, listener, sizes, topics, progress)
        except RuntimeError as error:  # e.g. 32 processes that cannot start in time on a loaded machine
            many = {"python": [], "kafka": []}
            result.notes.append(f"The many-producer shape was not measured: {error}")
    finally:
        listener.stop()
        for name in topics:
            drop_topic(broker, name)
        broker.close()
    megabytes = nbytes / 1e6
    for label, py, kafka in (("idempotent produce", "py-idempotent", "kafka-idempotent"),
                             ("transactional produce", "py-transactional", "kafka-transactional"),
                             ("read_committed consume", "py-consume", "kafka-consume")):
        times = produce if py in produce else consume
        result.add(throughput_ratio(f"{label}, Kafka client / Python API", times[py], times[kafka]))
        # CPU per MB (warm-up excluded): less noisy than wall time on a shared machine
        listener_ms = [1000 * s / megabytes for s in serve_cpu[kafka][1:]]
        python_ms = [1000 * s / megabytes for s in own_cpu[py][1:]]
        client_ms = [1000 * s / megabytes for s in own_cpu[kafka][1:]]
        result.add(_cpu_figure(f"{label}: listener CPU per MB", listener_ms))
        result.add(_cpu_figure(f"{label}: Python API process CPU per MB", python_ms))
        result.add(_cpu_figure(f"{label}: Kafka client process CPU per MB", client_ms))
        # what 2 cores allow at these CPU costs, whatever the wall times were: the Kafka
        # side needs at least half its processes' CPU time in wall time
        client_s, serve_s = own_cpu[kafka][1:], serve_cpu[kafka][1:]
        result.add(throughput_ratio(f"{label}: client ceiling (2 cores, listener free)", times[py],
                                    [c / 2 for c in client_s]))
        ceiling_s = [(c + s) / 2 for c, s in zip(client_s, serve_s, strict=True)]
        result.add(throughput_ratio(f"{label}: 2-core ceiling at these CPU costs", times[py], ceiling_s))
        # the targets: how near the ceiling the Kafka side runs (its wall time against
        # half its CPU time, repetition by repetition), and the listener's CPU per MB
        # against librdkafka's own
        result.add(throughput_ratio(f"{label}: Kafka client / its 2-core ceiling", ceiling_s, times[kafka],
                                    CEILING_TARGET))
        cpu_ratios = [s / c for s, c in zip(listener_ms, client_ms, strict=True) if c > 0]
        result.add(Figure(f"{label}: listener CPU per MB / Kafka client's", float(np.median(cpu_ratios)), "×",
                          CPU_TARGET, (min(cpu_ratios), max(cpu_ratios)), {"ratios": cpu_ratios}))
    result.add(latency_figure("commit p50 through the protocol (10 records)", latencies, 50))
    result.add(latency_figure("commit p99 through the protocol (10 records)", latencies, 99))
    _report_many(result, many)
    return result


def _many_producers(backend: Backend, broker: Any, listener: Listener, sizes: Sizes, topics: list[str],
                    progress: Callable[[str], None]) -> dict[str, list[dict[str, Any]]]:
    """The many-producer shape: ``MANY_PRODUCERS`` processes per side, each committing
    transactions of ``SMALL_TXN_RECORDS`` records to its own partition for
    ``concurrency_seconds``; the sides take turns ``MANY_REPS`` times. Per run: the
    workers' outputs and the servers' CPU seconds in the window (the listener's included
    on the Kafka side)."""
    count = min(MANY_PRODUCERS, sizes.max_producers)
    runs: dict[str, list[dict[str, Any]]] = {"python": [], "kafka": []}

    def side(name: str) -> None:
        topic = unique(f"c9m-{name}")
        if name == "kafka":  # Kafka's record shape, which the listener serves
            broker.create_topic(topic, partitions=count)
        else:  # case 7's workers send (key, value) tables
            broker.create_topic(topic, partitions=count, schema=data.RECORD_SCHEMA)
        topics.append(topic)
        if name == "kafka":
            def argv(i: int) -> list[str]:
                return ["bench.kafka_producer_worker", listener.bootstrap, topic, str(i), unique(f"c9m-k{i}"),
                        str(sizes.concurrency_seconds), str(SMALL_TXN_RECORDS), str(sizes.record_bytes)]

            def cpu() -> float:
                return backend.server_cpu_seconds() + listener.cpu_seconds()
        else:
            def argv(i: int) -> list[str]:
                return ["bench.producer_worker", topic, str(i), unique(f"c9m-p{i}"),
                        str(sizes.concurrency_seconds), str(SMALL_TXN_RECORDS), str(sizes.record_bytes)]

            cpu = backend.server_cpu_seconds
        outputs, server_cpu = _run_producers(backend, argv, count, sizes, cpu)
        commits = sum(o["commits"] for o in outputs)
        run = {"producers": count, "commits": commits, "commits_per_s": commits / sizes.concurrency_seconds,
               "latencies_s": [x for o in outputs for x in o["latencies_s"]],
               "client_cpu_s": sum(o["cpu_s"] for o in outputs), "server_cpu_s": server_cpu}
        runs[name].append(run)
        progress(f"{count} {name} producers: {run['commits_per_s']:,.0f} commits/s")

    for rep_no in range(min(MANY_REPS, sizes.reps)):
        for name in (("python", "kafka") if rep_no % 2 == 0 else ("kafka", "python")):
            side(name)
    return runs


def _report_many(result: CaseResult, runs: dict[str, list[dict[str, Any]]]) -> None:
    python, kafka = runs["python"], runs["kafka"]
    if not python or not kafka:
        return
    count = python[0]["producers"]
    ratios = [k["commits_per_s"] / p["commits_per_s"] for p, k in zip(python, kafka, strict=True)
              if p["commits_per_s"]]
    result.add(Figure(f"{count} transactional producers, aggregate commits/s, Kafka client / Python API",
                      float(np.median(ratios)) if ratios else float("nan"), "×", MANY_TARGET,
                      (min(ratios), max(ratios)) if ratios else None,
                      {"python": [r["commits_per_s"] for r in python], "kafka": [r["commits_per_s"] for r in kafka]}))
    notes = []
    for label, side in (("Python API", python), ("Kafka client", kafka)):
        rate = float(np.median([r["commits_per_s"] for r in side]))
        latency = percentiles([x for r in side for x in r["latencies_s"]], (50, 99))
        commits = sum(r["commits"] for r in side) or 1
        client = sum(r["client_cpu_s"] for r in side) / commits * 1e3
        server = sum(r["server_cpu_s"] for r in side) / commits * 1e3
        notes.append(f"{label}: {rate:,.0f} commits/s, commit p50 {latency['p50']:.1f} ms, p99 "
                     f"{latency['p99']:.1f} ms; CPU per commit: clients {client:.1f} ms, servers {server:.1f} ms"
                     + (" (listener, database, storage)" if label == "Kafka client" else " (database, storage)"))
    result.notes.append(f"{count} transactional producers, transactions of {SMALL_TXN_RECORDS} records: "
                        + "; ".join(notes) + ".")
    result.series["many_producers"] = {name: [{k: v for k, v in r.items() if k != "latencies_s"} for r in side]
                                        for name, side in runs.items()}


def _cpu_figure(name: str, per_mb_ms: list[float]) -> Figure:
    """The median CPU milliseconds per MB of the repetitions, with their range."""
    return Figure(name, float(np.median(per_mb_ms)), "ms", None, (min(per_mb_ms), max(per_mb_ms)),
                  {"samples_ms_per_mb": per_mb_ms})


def _touch(column: pa.ChunkedArray) -> None:
    """Read one byte of every page of the values (a memory-mapped segment is otherwise
    never read at all)."""
    for chunk in column.chunks:
        data = chunk.buffers()[2]
        if data is not None and data.size:
            np.frombuffer(data, dtype=np.uint8)[::4096].sum()


def _produce(producer: Any, topic: str, key: bytes, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=0)
            return
        except BufferError:  # librdkafka's queue is full: let it drain, as applications do
            producer.poll(0.05)


def _commit_latencies(producer_class: Any, common: dict[str, Any], topic: str, samples: int) -> list[float]:
    """commit_transaction() of small transactions through the protocol, the records
    delivered before the clock starts (as case 4 times the commit alone)."""
    producer = producer_class({**common, "linger.ms": 0, "transactional.id": unique("c9-lat")})
    producer.init_transactions(30)
    value = os.urandom(1008)
    latencies = []
    for i in range(samples + 1):
        producer.begin_transaction()
        for n in range(SMALL_TXN_RECORDS):
            producer.produce(topic, value=value, key=f"{i}-{n}".encode(), partition=0)
        producer.flush(30)
        start = time.perf_counter()
        producer.commit_transaction(30)
        if i:  # the first is a warm-up
            latencies.append(time.perf_counter() - start)
    return latencies

"""Case 7: 1, 4 and 16 concurrent transactional producers, each in its own OS process.
Target (on PostgreSQL): the broker's 16/1 ratio of aggregate commits/s ≥ 0.8 × PostgreSQL's
own 16/1 ratio on the same machine, for clients running the same database work as one
broker commit (``bench.pg_shape``).

Every producer has its own transactional id and partition of a 16-partition topic and
commits transactions of 10 records × 1 KB (upload included: this is the whole produce
path) as fast as it can for the same time window; processes start, connect and warm up
first, then all begin at one wall-clock instant."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import data, pg_shape
from .harness import CaseResult, Figure, Target, percentiles
from .servers import ROOT, Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "Concurrent transactional producers (processes)"
TARGET = Target(">=", 0.8)
RECORDS_PER_TXN = 10
READY_TIMEOUT_S = 180
#: commits of one producer over which case 7's baseline reads a commit's database work
SHAPE_COMMITS = 50


def _producer_argv(topic: str, partitions: int, sizes: Sizes) -> Callable[[int], list[str]]:
    return lambda i: ["bench.producer_worker", topic, str(i % partitions), unique(f"bench-c7-{i}"),
                      str(sizes.concurrency_seconds), str(RECORDS_PER_TXN), str(sizes.record_bytes)]


def _run_producers(backend: Backend, argv: Callable[[int], list[str]], count: int, sizes: Sizes,
                   server_cpu_seconds: Callable[[], float] | None = None) -> tuple[list[dict], float]:
    """Run ``count`` worker processes (``python -m`` + ``argv(i)``) for the window; their
    outputs, and the CPU seconds the servers used during the window (read by
    ``server_cpu_seconds``, default the backend's servers)."""
    server_cpu_seconds = server_cpu_seconds or backend.server_cpu_seconds
    env = {**os.environ, **backend.env}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    procs = [subprocess.Popen(
        [sys.executable, "-m", *argv(i)],
        env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(count)]
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for proc in procs:
            assert proc.stdout is not None and proc.stderr is not None
            ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
            line = proc.stdout.readline().strip() if ready else "(no answer in time)"
            if line != "ready":
                proc.kill()
                raise RuntimeError(f"producer process did not start: {line!r} {proc.stderr.read()[-2000:]}")
        start_at = time.time() + 0.2
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start_at}\n")
            proc.stdin.flush()
        time.sleep(max(start_at - time.time(), 0))
        server_cpu = server_cpu_seconds()
        time.sleep(max(start_at + sizes.concurrency_seconds - time.time(), 0))
        server_cpu = server_cpu_seconds() - server_cpu
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=sizes.concurrency_seconds + 120)
            if proc.returncode != 0:
                raise RuntimeError(f"producer process failed ({proc.returncode}): {err[-2000:]}")
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        return outputs, server_cpu
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class WaitSampler:
    """Samples what the broker's PostgreSQL sessions are doing (``pg_stat_activity``) every
    50 ms while producers run: lock waits would show commits serialising in the database;
    ``ClientRead`` means a session waits for its client (the producer process)."""

    def __init__(self, backend: Backend) -> None:
        self.url = backend.database_url if backend.pg is not None else None
        self.counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WaitSampler:
        if self.url:
            self._thread = threading.Thread(target=self._run, name="pg-wait-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url or "", pool_size=1)
        query = sa.text("SELECT state, wait_event_type, wait_event, query FROM pg_stat_activity "
                        "WHERE application_name = 'txn_broker' AND pid <> pg_backend_pid()")
        try:
            with engine.connect() as conn:
                while not self._stop.wait(0.05):
                    for state, kind, event, statement in conn.execute(query):
                        label = "idle" if state == "idle" else f"{state}: {kind}/{event}" if kind else str(state)
                        if kind == "Lock":  # which statement waits tells which row is contended
                            label += f" ({' '.join(str(statement).split())[:48]}…)"
                        self.counts[label] += 1
                    conn.rollback()
        finally:
            engine.dispose()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def summary(self) -> dict[str, float]:
        """Share of session samples by state, busiest first (idle sessions left out)."""
        busy = {k: v for k, v in self.counts.items() if k != "idle"}
        total = sum(busy.values())
        return {k: round(v / total, 3) for k, v in sorted(busy.items(), key=lambda kv: -kv[1])} if total else {}


def _series(backend: Backend, argv: Callable[[int], list[str]], counts: list[int], sizes: Sizes,
            progress: Callable[[str], None], label: str) -> list[dict]:
    """Run the workers at each count in turn, then one again; one row per run. On
    PostgreSQL the largest count's run also reads ``pg_stat_statements`` (where the
    database time goes)."""
    rows = []
    for count in [*counts, 1] if len(counts) > 1 else counts:
        statements = None
        with WaitSampler(backend) as waits:
            if backend.pg is not None and count == max(counts):
                with pg_shape.statistics(backend.database_url) as conn:
                    pg_shape.reset(conn)
                    outputs, server_cpu = _run_producers(backend, argv, count, sizes)
                    statements = pg_shape.read(conn)
            else:
                outputs, server_cpu = _run_producers(backend, argv, count, sizes)
        commits = sum(o["commits"] for o in outputs)
        client_cpu = sum(o["cpu_s"] for o in outputs)
        latencies = [x for o in outputs for x in o["latencies_s"]]
        row = {"producers": count, "commits": commits, "commits_per_s": commits / sizes.concurrency_seconds,
               "latency_ms": percentiles(latencies) if latencies else {},
               "per_producer_commits": [o["commits"] for o in outputs],
               "client_cpu_ms_per_commit": client_cpu / commits * 1e3 if commits else None,
               "server_cpu_ms_per_commit": server_cpu / commits * 1e3 if commits else None,
               "database_sessions": waits.summary()}
        if statements is not None:
            row["top_statements"] = pg_shape.top_statements(statements)
        rows.append(row)
        progress(f"{count} {label}: {row['commits_per_s']:,.0f} commits/s, p50 "
                 f"{row['latency_ms'].get('p50', float('nan')):.1f} ms")
    singles = [r for r in rows if r["producers"] == 1]
    one = sum(r["commits_per_s"] for r in singles) / len(singles)
    rows = [r for r in rows if r["producers"] != 1]
    rows.insert(0, {**singles[0], "commits_per_s": one, "runs": [r["commits_per_s"] for r in singles]})
    return rows


def _measure_shape(backend: Backend, broker: Any, topic: str, sizes: Sizes) -> pg_shape.Shape:
    """One broker commit's database work, from ``pg_stat_statements`` over SHAPE_COMMITS
    commits of one producer in this process (after a warm-up commit)."""
    batch = data.records(RECORDS_PER_TXN, sizes.record_bytes, seed=0)
    producer = broker.producer(transactional_id=unique("bench-c7-shape"))
    try:
        producer.init_transactions()
        with producer.transaction():
            producer.send(topic, batch, partition=0)
        with pg_shape.statistics(backend.database_url) as conn:
            pg_shape.reset(conn)
            for _ in range(SHAPE_COMMITS):
                with producer.transaction():
                    producer.send(topic, batch, partition=0)
            statements = pg_shape.read(conn)
    finally:
        producer.close()
    return pg_shape.shape_of(statements, SHAPE_COMMITS)


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    counts = sizes.producer_counts()
    partitions = max(counts)
    result = CaseResult(7, TITLE, backend.name, sizes=(
        f"{', '.join(map(str, counts))} producer processes, then 1 again (the baseline is the mean of both single "
        f"producer runs, cancelling drift), {sizes.concurrency_seconds} s each; transactions of "
        f"{RECORDS_PER_TXN} records × {sizes.record_bytes} B to the producer's own partition of a "
        f"{partitions}-partition topic"))
    broker = backend.connect()
    topic = new_topic(broker, "c7", data.RECORD_SCHEMA, partitions=partitions)
    baseline: list[dict] = []
    try:
        shape = _measure_shape(backend, broker, topic, sizes) if backend.pg is not None else None
        rows = _series(backend, _producer_argv(topic, partitions, sizes), counts, sizes, progress, "producers")
        if shape is not None:
            progress(f"PostgreSQL baseline: {shape.describe()} per commit")
            pg_shape.prepare(backend.database_url, max(counts))
            baseline = _series(backend, lambda i: ["bench.pg_shape_worker", backend.database_url, str(i),
                                                   str(sizes.concurrency_seconds), shape.to_json()],
                               [1, max(counts)], sizes, progress, "PostgreSQL clients")
    finally:
        drop_topic(broker, topic)
        broker.close()
    one = rows[0]["commits_per_s"]
    broker_ratio = {}
    for row in rows[1:]:
        broker_ratio[row["producers"]] = row["commits_per_s"] / one if one else float("nan")
        result.add(Figure(f"aggregate commits/s, {row['producers']} producers / 1 producer",
                          broker_ratio[row["producers"]], "×", None, None,
                          {"commits_per_s": row["commits_per_s"], "one_producer_commits_per_s": one}))
    result.series = {"rows": rows}
    cores = os.cpu_count() or 1
    result.notes.append("Aggregate commits/s: " + ", ".join(
        f"{r['producers']} → {r['commits_per_s']:,.0f}" for r in rows) + f" (on {cores} CPU cores).")
    if baseline and shape is not None:
        most = max(counts)
        pg_one = baseline[0]["commits_per_s"]
        pg_ratio = baseline[-1]["commits_per_s"] / pg_one if pg_one else float("nan")
        result.add(Figure(f"{most}/1 scaling, broker / PostgreSQL's own", broker_ratio[most] / pg_ratio, "×",
                          TARGET, None, {"broker_ratio": broker_ratio[most], "postgres_ratio": pg_ratio}))
        result.series["postgres_baseline"] = {"shape": shape.to_json(), "rows": baseline}
        result.notes.append(
            f"PostgreSQL's own scaling, clients running one broker commit's database work ({shape.describe()}), "
            f"durably, through the same driver: 1 → {pg_one:,.0f}, {most} → {baseline[-1]['commits_per_s']:,.0f} "
            f"commits/s, {pg_ratio:.2f}×; the broker: {broker_ratio[most]:.2f}×. CPU per commit in the client: "
            f"{baseline[0]['client_cpu_ms_per_commit'] or 0:.1f} ms (baseline) against "
            f"{rows[0]['client_cpu_ms_per_commit'] or 0:.1f} ms (producer).")
    first = rows[0]
    if first["client_cpu_ms_per_commit"]:
        cpu_ms = first["client_cpu_ms_per_commit"] + (first["server_cpu_ms_per_commit"] or 0)
        ceiling = cores * 1000 / cpu_ms
        result.series["cpu_ceiling_commits_per_s"] = ceiling
        result.notes.append(
            f"CPU per commit with one producer: {first['client_cpu_ms_per_commit']:.1f} ms in the producer process "
            f"+ {first['server_cpu_ms_per_commit'] or 0:.1f} ms in the servers (PostgreSQL, moto). "
            f"{cores} cores can therefore complete at most ~{ceiling:,.0f} commits/s, "
            f"{ceiling / one if one else float('nan'):.1f}× what one producer reached: the most any number of "
            "producers could gain on this machine, whatever the broker does.")
    last = rows[-1]
    if last["database_sessions"]:
        locks = sum(v for k, v in last["database_sessions"].items() if ": Lock/" in k)
        result.notes.append(
            f"PostgreSQL sessions with {last['producers']} producers (busy samples): "
            + ", ".join(f"{k} {v:.0%}" for k, v in list(last["database_sessions"].items())[:5])
            + f"; waiting on locks: {locks:.0%}.")
    if last.get("top_statements"):
        result.notes.append(f"Database time with {last['producers']} producers (pg_stat_statements): "
                            + "; ".join(last["top_statements"]) + ".")
    return result

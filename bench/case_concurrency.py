"""Case 7: 1, 4 and 16 concurrent transactional producers, each in its own OS process.
Target (on PostgreSQL): aggregate commits/s with 16 producers ≥ 4× one producer.

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

from . import data
from .harness import CaseResult, Figure, Target, percentiles
from .servers import ROOT, Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "Concurrent transactional producers (processes)"
TARGET = Target(">=", 4.0)
RECORDS_PER_TXN = 10
READY_TIMEOUT_S = 180


def _run_producers(backend: Backend, topic: str, count: int, partitions: int, sizes: Sizes
                   ) -> tuple[list[dict], float]:
    """Run ``count`` producer processes for the window; their outputs, and the CPU seconds
    the servers used during the window."""
    env = {**os.environ, **backend.env}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "bench.producer_worker", topic, str(i % partitions), unique(f"bench-c7-{i}"),
         str(sizes.concurrency_seconds), str(RECORDS_PER_TXN), str(sizes.record_bytes)],
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
        server_cpu = backend.server_cpu_seconds()
        time.sleep(max(start_at + sizes.concurrency_seconds - time.time(), 0))
        server_cpu = backend.server_cpu_seconds() - server_cpu
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
    rows = []
    try:
        for count in [*counts, 1] if len(counts) > 1 else counts:
            with WaitSampler(backend) as waits:
                outputs, server_cpu = _run_producers(backend, topic, count, partitions, sizes)
            commits = sum(o["commits"] for o in outputs)
            client_cpu = sum(o["cpu_s"] for o in outputs)
            latencies = [x for o in outputs for x in o["latencies_s"]]
            row = {"producers": count, "commits": commits, "commits_per_s": commits / sizes.concurrency_seconds,
                   "latency_ms": percentiles(latencies) if latencies else {},
                   "per_producer_commits": [o["commits"] for o in outputs],
                   "client_cpu_ms_per_commit": client_cpu / commits * 1e3 if commits else None,
                   "server_cpu_ms_per_commit": server_cpu / commits * 1e3 if commits else None,
                   "database_sessions": waits.summary()}
            rows.append(row)
            progress(f"{count} producers: {row['commits_per_s']:,.0f} commits/s, transaction p50 "
                     f"{row['latency_ms'].get('p50', float('nan')):.1f} ms")
    finally:
        drop_topic(broker, topic)
        broker.close()
    singles = [r for r in rows if r["producers"] == 1]
    one = sum(r["commits_per_s"] for r in singles) / len(singles)
    rows = [r for r in rows if r["producers"] != 1]
    rows.insert(0, {**singles[0], "commits_per_s": one, "runs": [r["commits_per_s"] for r in singles]})
    for row in rows[1:]:
        result.add(Figure(f"aggregate commits/s, {row['producers']} producers / 1 producer",
                          row["commits_per_s"] / one if one else float("nan"), "×",
                          TARGET if row["producers"] == 16 else None, None,
                          {"commits_per_s": row["commits_per_s"], "one_producer_commits_per_s": one}))
    result.series = {"rows": rows}
    cores = os.cpu_count() or 1
    result.notes.append("Aggregate commits/s: " + ", ".join(
        f"{r['producers']} → {r['commits_per_s']:,.0f}" for r in rows) + f" (on {cores} CPU cores).")
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
        locks = sum(v for k, v in last["database_sessions"].items() if "Lock/" in k)
        result.notes.append(
            f"PostgreSQL sessions with {last['producers']} producers (busy samples): "
            + ", ".join(f"{k} {v:.0%}" for k, v in list(last["database_sessions"].items())[:5])
            + f"; waiting on locks: {locks:.0%}.")
    return result

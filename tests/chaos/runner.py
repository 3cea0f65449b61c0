"""One chaos run: client processes (``client.py``) under nemeses scheduled at random by a
seed, then recovery, final reads of every partition and the checker (``checker.py``).

    run = ChaosRun(config, backend, out_dir, pg=server, s3=server)
    result = run.execute()          # result.report.ok, result.faults, result.seconds

Nemeses (``ChaosConfig.nemeses``):

* ``kill``: SIGKILL a random client (producer, consumer, copier or sweeper) at a random time;
* ``commit-kill``: clients run with ``TXN_BROKER_FAULTS_KILL_RATE``, so they also die at the
  coordinator's fault points: between upload and registration, and between the steps of a
  commit or an abort, and in the sweeps between claim and fence;
* ``pause``: SIGSTOP a transactional client, start a replacement (which fences it), then
  SIGCONT the old one: a zombie that must be refused;
* ``pg-restart``: ``pg_ctl stop -m immediate`` (a crash), then start PostgreSQL again;
* ``s3``: phases of 5xx answers, slow answers, uploads cut off and lost PUT replies,
  and short outages, through ``s3proxy.py``;
* ``compact``: ``txn-broker compact`` (segments at least :data:`COMPACT_MIN_AGE_MS` old) or
  ``txn-broker gc`` (a short delete delay, so readers in flight lose the objects they planned
  on and plan again), in a process of its own, sometimes SIGKILLed before or after a merge's
  swap; concurrently with every client, the other nemeses and, now and then, a second
  compactor;
* sweeps always run concurrently with live producers (the ``sweeper`` client).

After the run: faults healed, clients stopped, expired transactions swept, the copiers
drained (so nothing consumed may be lost), with the ``compact`` nemesis every partition
compacted, then every partition read from 0 to its high
watermark at read_uncommitted and to its last stable offset at read_committed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import Report, check, read_history
from chaos.client import COPY_GROUP, COPY_IN, COPY_OUT, COPY_SUFFIX, PARTITIONS, TOPICS, TXN_TIMEOUT_MS
from chaos.history import History

from txn_broker import TopicPartition

ROOT = Path(__file__).resolve().parents[2]
ALL_NEMESES = ("kill", "commit-kill", "pause", "pg-restart", "s3", "compact")
NEMESIS_WEIGHTS = {"kill": 4, "pause": 2, "pg-restart": 1, "s3": 3, "compact": 3}
#: the age a segment must reach before the compact nemesis merges it: above the clients'
#: transaction timeout, so that a retried append finds the segment it is a retry of
COMPACT_MIN_AGE_MS = 10_000
READY_TIMEOUT_S = 240
TRANSACTIONAL = ("txn-producer", "feeder", "transfer", "copier")


@dataclass
class ChaosConfig:
    seed: int
    duration_s: float = 30.0
    nemeses: tuple[str, ...] = ALL_NEMESES
    clients: dict[str, int] = field(default_factory=lambda: {
        "txn-producer": 1, "producer": 1, "feeder": 1, "transfer": 1, "copier": 2,
        "poller-rc": 1, "poller-ru": 1, "sweeper": 1})
    kill_rate: float = 0.01  # per fault point, in the clients that run with it
    nemesis_interval_s: tuple[float, float] = (0.5, 3.0)


@dataclass
class RunResult:
    config: ChaosConfig
    backend: str
    report: Report
    faults: Counter[str]
    exits: Counter[str]
    seconds: float
    out_dir: Path

    def summary(self) -> dict[str, Any]:
        return {"seed": self.config.seed, "backend": self.backend, "seconds": round(self.seconds, 1),
                "duration_s": self.config.duration_s, "nemeses": list(self.config.nemeses),
                "faults": dict(self.faults), "exits": dict(self.exits), **self.report.to_json()}


class Slot:
    def __init__(self, role: str, index: int) -> None:
        self.role, self.index = role, index
        self.proc: subprocess.Popen[bytes] | None = None
        self.zombies: list[subprocess.Popen[bytes]] = []
        self.starts = 0


class ChaosRun:
    def __init__(self, config: ChaosConfig, backend: Any, out_dir: Path, *, pg: Any = None,
                 s3: Any = None) -> None:
        self.config = config
        self.backend = backend
        self.out = out_dir
        self.out.mkdir(parents=True, exist_ok=True)
        self.pg = pg
        self.s3 = s3
        self.rng = random.Random(config.seed)
        self.faults: Counter[str] = Counter()
        self.exits: Counter[str] = Counter()
        self.nemesis_log = History(self.out / "nemesis.jsonl", process="nemesis")
        self.proxy: subprocess.Popen[bytes] | None = None
        self.proxy_url: str | None = None
        self.lock = threading.Lock()
        self.slots = [Slot(role, i) for role, n in config.clients.items() for i in range(n)]
        self.stop = threading.Event()
        self.fsck_problems: list[str] = []
        self.compactor: threading.Thread | None = None
        self.fsck_warnings = 0
        self.until = float("inf")
        self.stop_file = self.out / "stop"
        self.ready_dir = self.out / "ready"
        self.ready_dir.mkdir(exist_ok=True)

    # -- processes -------------------------------------------------------------------------

    def env(self, faulty: bool) -> dict[str, str]:
        env = {**os.environ, **self.backend.env}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
        env["CHAOS_TXN_TIMEOUT_MS"] = str(TXN_TIMEOUT_MS)
        if self.proxy_url:
            env["TXN_BROKER_S3_ENDPOINT_URL"] = self.proxy_url
        for k in ("TXN_BROKER_FAULTS", "TXN_BROKER_FAULTS_KILL_RATE", "TXN_BROKER_FAULTS_SEED"):
            env.pop(k, None)
        if faulty and "commit-kill" in self.config.nemeses:
            env["TXN_BROKER_FAULTS_KILL_RATE"] = str(self.config.kill_rate)
            env["TXN_BROKER_FAULTS_SEED"] = str(self.rng.randrange(1 << 30))
        return env

    def spawn(self, role: str, index: int, *, drain: bool = False, faulty: bool = True) -> subprocess.Popen[bytes]:
        history = self.out / f"history-{role}{index}-{time.time_ns()}.jsonl"
        cmd = [sys.executable, "-m", "chaos.client", role, str(index), "--history", str(history),
               "--stop", str(self.stop_file), "--ready", str(self.ready_dir),
               "--seed", str(self.config.seed)] + (["--drain"] if drain else [])
        log = open(self.out / f"client-{role}{index}.log", "ab")  # noqa: SIM115 (owned by the child)
        try:
            return subprocess.Popen(cmd, env=self.env(faulty), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        finally:
            log.close()

    def start_slot(self, slot: Slot) -> None:
        # half of the writers also die at the coordinator's own fault points
        faulty = slot.role != "poller-rc" and slot.role != "poller-ru" and slot.index % 2 == 0
        slot.proc = self.spawn(slot.role, slot.index, faulty=faulty)
        slot.starts += 1

    def supervise(self) -> None:
        """Restart clients that died (killed, or exited because an outcome was unknown)."""
        with self.lock:
            for slot in self.slots:
                code = slot.proc.poll() if slot.proc else 0
                if slot.proc is None or code is None:
                    continue
                self.exits[{-9: "killed", 3: "unknown-outcome", 0: "finished"}.get(code, f"exit {code}")] += 1
                slot.proc = None
                if time.time() < self.until - 1:
                    self.start_slot(slot)

    # -- nemeses ---------------------------------------------------------------------------

    def note(self, kind: str, **details: Any) -> None:
        self.faults[kind] += 1
        self.nemesis_log.write({"type": "nemesis", "f": kind, **details})

    def nemesis_loop(self) -> None:
        kinds = [n for n in self.config.nemeses if n != "commit-kill"]
        if self.pg is None:
            kinds = [k for k in kinds if k != "pg-restart"]
        if self.proxy is None:
            kinds = [k for k in kinds if k != "s3"]
        first = self.rng.sample(kinds, len(kinds))  # every kind once, in a seeded order, then at random
        while kinds and not self.stop.wait(self.rng.uniform(*self.config.nemesis_interval_s)):
            if time.time() > self.until - 3:
                break
            kind = first.pop() if first else self.rng.choices(kinds, [NEMESIS_WEIGHTS[k] for k in kinds])[0]
            getattr(self, "nemesis_" + kind.replace("-", "_"))()

    def nemesis_kill(self) -> None:
        with self.lock:
            live = [s for s in self.slots if s.proc is not None and s.proc.poll() is None]
            if not live:
                return
            slot = self.rng.choice(live)
            assert slot.proc is not None
            os.kill(slot.proc.pid, signal.SIGKILL)
        self.note("kill", role=slot.role, slot=slot.index)

    def nemesis_pause(self) -> None:
        with self.lock:
            live = [s for s in self.slots if s.role in TRANSACTIONAL and s.proc is not None
                    and s.proc.poll() is None]
            if not live:
                return
            slot = self.rng.choice(live)
            assert slot.proc is not None
            os.kill(slot.proc.pid, signal.SIGSTOP)
            slot.zombies.append(slot.proc)
            self.start_slot(slot)  # the replacement's init_transactions fences the paused one
        self.note("pause", role=slot.role, slot=slot.index)
        time.sleep(self.rng.uniform(1.0, 4.0))
        zombie = slot.zombies[-1]
        os.kill(zombie.pid, signal.SIGCONT)

    def nemesis_pg_restart(self) -> None:
        self.note("pg-restart")
        self.pg.stop("immediate")
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.pg.start()

    def nemesis_s3(self) -> None:
        phase = self.rng.choice(["errors", "slow", "drops", "lost-replies", "mixed", "outage"])
        config = {
            "errors": {"error": 0.3},
            "slow": {"slow": 0.5, "slow_ms": [200, 2500]},
            "drops": {"drop": 0.3},
            "lost-replies": {"lost_reply": 0.4},
            "mixed": {"error": 0.15, "slow": 0.15, "drop": 0.1, "lost_reply": 0.1},
            "outage": {"error": 1.0},
        }[phase]
        self.note("s3-" + phase)
        self.proxy_config(config)
        self.stop.wait(self.rng.uniform(2.0, 6.0) if phase != "outage" else self.rng.uniform(1.0, 4.0))
        self.proxy_config({"error": 0.0, "slow": 0.0, "drop": 0.0, "lost_reply": 0.0})

    def nemesis_compact(self) -> None:
        """Starts a compaction in the background (its processes take seconds to start on a
        loaded machine; the other nemeses go on meanwhile); one at a time."""
        if self.compactor is not None and self.compactor.is_alive():
            return
        mode = self.rng.choice(["compact", "compact", "kill-before-swap", "kill-after-swap", "gc", "two"])
        self.note("compact-" + mode)
        self.compactor = threading.Thread(target=self.compact, args=(mode,), name="compactor", daemon=True)
        self.compactor.start()

    def compact(self, mode: str) -> None:
        env = self.env(faulty=False)
        if mode.startswith("kill"):
            env["TXN_BROKER_FAULTS"] = ("rewrite.before_swap" if mode == "kill-before-swap"
                                        else "rewrite.after_swap") + "=kill"
        args = (["gc", "--delete-delay-ms", "3000", "--orphan-grace-ms", str(10**9)] if mode == "gc"
                else ["compact", "--min-age-ms", str(COMPACT_MIN_AGE_MS)])
        command = [sys.executable, "-m", "txn_broker.cli", "--json", *args]
        procs = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2 if mode == "two" else 1)]
        codes = []
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            codes.append(proc.returncode)
            if proc.returncode not in (0, -9):
                # a database or storage fault of another nemesis: retriable, the next run does it
                with (self.out / "compact.log").open("ab") as log:
                    log.write(err[-2000:])
        self.nemesis_log.write({"type": "nemesis", "f": "compact-done", "mode": mode, "codes": codes,
                                "report": (out or b"")[-300:].decode(errors="replace")})

    def proxy_config(self, config: dict[str, Any]) -> None:
        assert self.proxy_url
        request = urllib.request.Request(self.proxy_url + "/__chaos__/config", data=json.dumps(config).encode(),
                                         method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()

    def proxy_stats(self) -> dict[str, int]:
        assert self.proxy_url
        with urllib.request.urlopen(self.proxy_url + "/__chaos__/stats", timeout=10) as reply:
            return json.loads(reply.read())

    def start_proxy(self) -> None:
        ready = self.out / "proxy.port"
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "chaos.s3proxy", "--upstream", self.s3.endpoint_url,
             "--seed", str(self.config.seed), "--ready", str(ready)],
            env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=open(self.out / "proxy.log", "ab"))  # noqa: SIM115
        deadline = time.time() + 30
        while not ready.exists():
            if self.proxy.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the S3 fault proxy did not start: {(self.out / 'proxy.log').read_text()}")
            time.sleep(0.05)
        self.proxy_url = f"http://127.0.0.1:{ready.read_text().strip()}"

    # -- the run ---------------------------------------------------------------------------

    def execute(self) -> RunResult:
        started = time.monotonic()
        broker = self.backend.connect()
        try:
            for topic in TOPICS:
                broker.create_topic(topic, partitions=PARTITIONS)
        finally:
            broker.close()
        if self.s3 is not None and "s3" in self.config.nemeses:
            self.start_proxy()
        try:
            for slot in self.slots:
                self.start_slot(slot)
            self.wait_until_ready()
            self.until = time.time() + self.config.duration_s
            nemesis = threading.Thread(target=self.nemesis_loop, name="nemesis", daemon=True)
            nemesis.start()
            while time.time() < self.until:
                self.supervise()
                time.sleep(0.2)
            self.stop.set()
            self.stop_file.touch()
            nemesis.join(timeout=60)
            if self.compactor is not None:
                self.compactor.join(timeout=400)
            self.heal()
            self.wait_for_clients()
            self.recover()
            self.final_reads()
        finally:
            self.cleanup()
        if self.proxy_url:
            for kind, n in self.proxy_stats_saved.items():
                if not kind.startswith("requests_"):
                    self.faults["s3-injected-" + kind] += n
        report = check(read_history(sorted(self.out.glob("history-*.jsonl"))))
        report.stats["fsck_problems"] = self.fsck_problems
        report.stats["fsck_orphan_warnings"] = self.fsck_warnings
        result = RunResult(self.config, self.backend.name, report, self.faults, self.exits,
                           time.monotonic() - started, self.out)
        (self.out / "report.json").write_text(json.dumps(result.summary(), indent=2, default=str))
        return result

    proxy_stats_saved: dict[str, int] = {}

    def wait_until_ready(self) -> None:
        """Faults start once every client is connected (starting a dozen interpreters on a
        loaded two-core machine takes a while; that is not the run's time)."""
        deadline = time.time() + READY_TIMEOUT_S
        wanted = {f"{s.role}{s.index}" for s in self.slots}
        while True:
            ready = {p.name.rsplit(".", 1)[0] for p in self.ready_dir.iterdir()}
            if wanted <= ready:
                return
            if time.time() > deadline:
                raise RuntimeError(f"clients not ready after {READY_TIMEOUT_S}s: {sorted(wanted - ready)}")
            self.supervise()
            time.sleep(0.1)

    def heal(self) -> None:
        if self.proxy_url:
            self.proxy_config({"error": 0.0, "slow": 0.0, "drop": 0.0, "lost_reply": 0.0})
            self.proxy_stats_saved = self.proxy_stats()
        if self.pg is not None:
            try:
                self.pg.start()  # no-op failure if it is running
            except RuntimeError:
                pass
        for slot in self.slots:
            for zombie in slot.zombies:
                if zombie.poll() is None:
                    os.kill(zombie.pid, signal.SIGCONT)

    def wait_for_clients(self) -> None:
        deadline = time.time() + 90
        procs = [p for s in self.slots for p in [s.proc, *s.zombies] if p is not None]
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.time(), 1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                self.exits["hung-killed"] += 1
        self.supervise()

    def sweep(self, broker: Any, *, wait: bool) -> None:
        """Abort what is still open (after waiting out every transaction timeout) and roll
        forward what is decided: the sweeps' job, with no producer left alive."""
        if wait:
            time.sleep(TXN_TIMEOUT_MS / 1000 + 0.5)
        for _ in range(5):
            done = broker.abort_expired_transactions() + broker.complete_prepared_transactions()
            if not done:
                break

    def recover(self) -> None:
        broker = self.backend.connect()
        try:
            self.sweep(broker, wait=True)
            drains = [self.spawn("copier", i, drain=True, faulty=False)
                      for i in range(self.config.clients.get("copier", 0))]
            for p in drains:
                if p.wait(timeout=300) != 0:
                    raise RuntimeError(f"a draining copier failed; see {self.out}/client-copier*.log")
            self.sweep(broker, wait=False)
            if "compact" in self.config.nemeses:
                # everything is decided and no client is left: merge all of it, so that the
                # final reads are of compacted partitions, checked against every poll and ack
                done = broker.compact(min_age_ms=0)
                self.note("compact-final", merged=done.segments_replaced, written=done.segments_written,
                          dropped=done.aborted_records_dropped)
        finally:
            broker.close()

    def final_reads(self) -> None:
        final = History(self.out / "history-final.jsonl", process="final")
        broker = self.backend.connect()
        try:
            for topic in TOPICS:
                for p in range(PARTITIONS):
                    tp = TopicPartition(topic, p)
                    hw = broker.end_offsets([tp], "read_uncommitted")[tp]
                    lso = broker.end_offsets([tp], "read_committed")[tp]
                    rows = {iso: read_partition(broker, tp, iso) for iso in ("read_committed", "read_uncommitted")}
                    final.final(topic, p, hw, lso, rows["read_committed"], rows["read_uncommitted"])
            tps = [TopicPartition(COPY_IN, p) for p in range(PARTITIONS)]
            committed = broker.committed_offsets(COPY_GROUP, tps)
            final.final_group(COPY_GROUP, [[tp.topic, tp.partition, committed[tp] or 0] for tp in tps])
            final.meta(copy=[{"input": COPY_IN, "output": COPY_OUT, "group": COPY_GROUP, "suffix": COPY_SUFFIX}])
            fsck = broker.fsck()
            self.fsck_problems = [f.message for f in fsck.problems]
            self.fsck_warnings = len(fsck.warnings)
        finally:
            broker.close()
            final.close()

    def cleanup(self) -> None:
        self.stop.set()
        for slot in self.slots:
            for p in [slot.proc, *slot.zombies]:
                if p is not None and p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                    p.wait()
        if self.proxy is not None:
            self.proxy.terminate()
            self.proxy.wait(10)
        self.nemesis_log.close()


def read_partition(broker: Any, tp: TopicPartition, isolation: str) -> list[list[Any]]:
    consumer = broker.consumer(isolation_level=isolation)
    consumer.assign([tp])
    consumer.seek_to_beginning()
    rows = []
    while batch := consumer.poll(max_records=10_000).to_pylist():
        rows += [[r["_offset"], r["value"].decode()] for r in batch]
    consumer.close()
    return rows

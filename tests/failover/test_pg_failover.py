"""Exactly once through a PostgreSQL failover (issue 14, section 3).

Kafka keeps every acknowledged write through a leader failover because a write is
acknowledged only once every in-sync replica has it. Here the metadata database plays that
part: PostgreSQL runs as a primary with a synchronous streaming standby (``_replication.py``),
the broker's clients name both servers (``host=A&host=B&target_session_attrs=read-write``),
and in the middle of a transactional workload the standby first falls behind (the primary's
WAL sender is stopped, so commits wait for it), then the primary dies (every process
SIGKILLed) and the standby is promoted.

The workload and the checks are the chaos tier's (``tests/chaos``): client processes that
record every invocation and every acknowledgement client-side (a feeder, two exactly-once
copiers consuming its topic and committing their offsets in their transactions, a bank of
transfers between accounts on different partitions, a read_committed poller, a sweeper),
then final reads of every partition from the new primary and the anomaly checker: no
acknowledged commit lost, no duplicate, no torn transaction (all of a transaction's
partitions or none, its group offsets with its records), the transfers sum to zero, every
input below the copiers' committed offsets copied exactly once and none above; and
``fsck`` (API and CLI) clean. A commit whose outcome became unknown when the primary died
is retried by its client, which is the only legal call (producer.py's state table), and
the checker accepts either outcome for it, but atomic. The last test follows one such
commit step by step.

The negative control runs the same schedule with the standby asynchronous: the primary
acknowledges the commits it makes while the standby lags, the failover loses them, and the
checker must say so (lost writes). The stopped WAL sender makes that deterministic: without
it, a standby on loopback is usually less than a millisecond behind, and whether a crash
loses anything would be chance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _replication import ReplicatedPostgres
from _servers import AWS_TEST_ENV, Backend
from chaos.checker import read_history
from chaos.runner import ChaosConfig, ChaosRun

from txn_broker import TopicPartition
from txn_broker.errors import DatabaseUnavailableError, IllegalStateError
from txn_broker.migrations import upgrade

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: the standby is stalled once the clients have this many transactions acknowledged (or
#: after BEFORE_MAX_S), the primary dies STALL_S later, and the run goes on on the new
#: primary for AFTER_S
ACKS_BEFORE, BEFORE_MAX_S, STALL_S, AFTER_S = 12, 30.0, 1.5, 5.0
#: transaction timeout of the clients: well above the stall and failover together, even on
#: a loaded machine (the sweeper fences a producer whose transaction outlives it)
TXN_TIMEOUT_MS = 10_000
CLIENTS = {"feeder": 1, "copier": 2, "transfer": 1, "poller-rc": 1, "sweeper": 1}


class FailoverRun(ChaosRun):
    """A chaos run whose only nemesis is one failover: stall the standby, kill the primary,
    promote the standby."""

    def __init__(self, cluster: ReplicatedPostgres, backend: Backend, out: Path, s3: Any) -> None:
        # the run lasts until the nemesis ends it, AFTER_S after the failover
        config = ChaosConfig(seed=3, duration_s=3600.0, nemeses=(), clients=dict(CLIENTS))
        super().__init__(config, backend, out, pg=None, s3=s3)
        self.cluster = cluster
        self.moments: dict[str, float] = {}
        self.steps: dict[str, float] = {}
        self.error: BaseException | None = None

    def env(self, faulty: bool) -> dict[str, str]:
        env = super().env(faulty)
        env["CHAOS_TXN_TIMEOUT_MS"] = str(TXN_TIMEOUT_MS)
        return env

    def wait_until_ready(self) -> None:
        self.moments["start"] = time.time()
        super().wait_until_ready()

    def recover(self) -> None:
        """The sweeps only: the copiers are not drained (two more interpreters to start).
        The checker needs no drain: an input below the group's committed offset must have
        been copied exactly once, one above it not at all, wherever the copiers stopped."""
        self.moments["recover"] = time.time()
        broker = self.backend.connect()
        try:
            self.sweep(broker, wait=True)
        finally:
            broker.close()

    def final_reads(self) -> None:
        self.moments["final_reads"] = time.time()
        super().final_reads()
        self.moments["checked"] = time.time()

    def sweep(self, broker: Any, *, wait: bool) -> None:
        """Every client has stopped: instead of waiting out the transaction timeout, abort
        what a client left open (one that exited after an unknown outcome) as an
        administrator would; the sweeps then roll forward what is decided."""
        if wait:
            for txn in broker.list_transactions(states=["Ongoing"]):
                broker.abort_transaction(txn.transactional_id)
        super().sweep(broker, wait=False)

    def nemesis_loop(self) -> None:
        self.moments["ready"] = time.time()  # every client connected and initialised
        try:
            deadline = time.time() + BEFORE_MAX_S
            while acknowledged(self.out) < ACKS_BEFORE and time.time() < deadline:
                if self.stop.wait(0.2):
                    return
            self.moments["stalled"] = time.time()
            self.cluster.stall_replication()
            self.note("replication-stall")
            acked = acknowledged(self.out)
            if self.stop.wait(STALL_S):
                return
            # an asynchronous primary goes on acknowledging: make sure some of those
            # commits are at stake (a synchronous one acknowledges none meanwhile)
            deadline = time.time() + 10
            while (not self.cluster.synchronous and acknowledged(self.out) < acked + 3
                   and time.time() < deadline):
                if self.stop.wait(0.2):
                    return
            self.moments["killed"] = time.time()
            self.steps = self.cluster.fail_over()
            self.moments["promoted"] = time.time()
            self.note("failover", **{k: round(v, 3) for k, v in self.steps.items()})
            self.stop.wait(AFTER_S)
        except BaseException as error:  # a daemon thread: the test raises it
            self.error = error
        finally:
            self.until = time.time()  # ends the run


def acknowledged(out: Path) -> int:
    """Transactions the clients have recorded as acknowledged so far."""
    return sum(p.read_bytes().count(b'"type":"ok","f":"txn"') for p in out.glob("history-*.jsonl"))


@pytest.fixture
def failover_backend(request, s3_server, monkeypatch):
    """``make(synchronous)``: a replicated cluster, a migrated database on it reached through
    both hosts, and a bucket; the cluster is torn down after the test."""
    clusters: list[ReplicatedPostgres] = []

    def make(synchronous: bool) -> tuple[ReplicatedPostgres, Backend]:
        started = time.monotonic()
        cluster = ReplicatedPostgres(synchronous=synchronous)
        clusters.append(cluster)
        url = cluster.new_database(f"fo_{uuid.uuid4().hex[:8]}")
        upgrade(url)
        backend = Backend("postgres", url, f"s3://{s3_server.new_bucket()}/segments")
        backend.env = {"TXN_BROKER_DATABASE_URL": url, "TXN_BROKER_STORAGE_URL": backend.storage_url,
                       "TXN_BROKER_S3_ENDPOINT_URL": s3_server.endpoint_url, **AWS_TEST_ENV}
        monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", s3_server.endpoint_url)
        print(f"cluster ({'sync' if synchronous else 'async'} standby) ready in "
              f"{time.monotonic() - started:.1f}s")
        return cluster, backend

    yield make
    for cluster in clusters:
        started = time.monotonic()
        cluster.close()
        print(f"cluster closed in {time.monotonic() - started:.1f}s")


def _run(cluster: ReplicatedPostgres, backend: Backend, out: Path, s3: Any) -> tuple[FailoverRun, Any, dict]:
    run = FailoverRun(cluster, backend, out, s3)
    started = time.monotonic()
    try:
        result = run.execute()
    finally:
        if run.error is not None:
            raise run.error
    assert "killed" in run.moments, "the failover did not happen"
    figures = _figures(run, out)
    figures["run_s"] = round(time.monotonic() - started, 1)
    return run, result, figures


def _figures(run: FailoverRun, out: Path) -> dict[str, Any]:
    """What the clients saw: commits acknowledged before the stall, during it, after the
    failover, and the gap from the kill to the first commit acknowledged by the new primary."""
    events = read_history(sorted(out.glob("history-*.jsonl")))
    acks = sorted(e["time"] for e in events if e.get("type") == "ok" and e.get("f") == "txn")
    stalled, killed, promoted = run.moments["stalled"], run.moments["killed"], run.moments["promoted"]
    after = [t for t in acks if t > killed]
    invoked = {e["id"]: e["time"] for e in events if e.get("type") == "invoke" and e.get("f") == "txn"}
    # transactions open (most of them waiting in their commit) when the primary died, whose
    # clients carried on and got an answer from the new primary
    spanning = [e for e in events if e.get("f") == "txn" and e.get("type") in ("ok", "fail")
                and invoked.get(e["id"], killed) < killed < e["time"]]
    logs = "".join(p.read_text(errors="replace") for p in out.glob("client-*.log"))
    m = run.moments
    return {
        "phases_s": {"clients_start": round(m["ready"] - m["start"], 1),
                     "workload": round(m["recover"] - m["ready"], 1),
                     "recover": round(m["final_reads"] - m["recover"], 1),
                     "final_reads_fsck": round(m["checked"] - m["final_reads"], 1)},
        "ready_to_stall_s": round(stalled - run.moments["ready"], 1),
        "acked_before_stall": sum(1 for t in acks if t < stalled),
        "acked_during_stall": sum(1 for t in acks if stalled <= t < killed),
        "acked_after_failover": len(after),
        "failover_s": round(run.steps["failover_s"], 3),
        "promote_s": round(run.steps["promote_s"], 3),
        "kill_to_promoted_s": round(promoted - killed, 3),
        "kill_to_first_ack_s": round(after[0] - killed, 3) if after else None,
        "spanning_failover": {k: sum(1 for e in spanning if e["type"] == k) for k in ("ok", "fail")},
        "client_retries": logs.count("retrying after database"),
    }


def test_synchronous_standby_failover_keeps_every_acknowledged_commit(failover_backend, s3_server, tmp_path):
    cluster, backend = failover_backend(True)
    assert cluster.replication_state() == ("streaming", "sync")
    run, result, figures = _run(cluster, backend, tmp_path / "sync", s3_server)
    summary = result.summary()
    print(json.dumps({"figures": figures, "operations": summary["stats"]["operations"],
                      "exits": summary["exits"], "seconds": summary["seconds"]}, default=str))

    # the broker runs on the promoted standby now, reached through the same URL
    engine = sa.create_engine(backend.database_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT inet_server_port()")).scalar() == cluster.standby.port
            assert conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar() is False
    finally:
        engine.dispose()

    assert result.report.ok, f"anomalies after the failover; history in {result.out_dir}: " + json.dumps(
        result.report.to_json(), default=str)[:4000]
    assert result.report.stats["fsck_problems"] == [], "fsck found inconsistencies after the failover"
    assert result.report.stats["transfer_balance"] == 0
    # and as an operator checks it: the CLI, with the same two-host URL
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXN_BROKER_")}
    fsck = subprocess.run([str(Path(sys.executable).with_name("txn-broker")), "fsck"], env={**env, **backend.env},
                          capture_output=True, text=True, timeout=120)
    assert fsck.returncode == 0 and "fsck: OK" in fsck.stdout, fsck.stdout + fsck.stderr
    crashes = {k: n for k, n in result.exits.items() if k.startswith("exit") or k == "hung-killed"}
    assert not crashes, f"clients failed with untyped or fatal errors; see {result.out_dir}/client-*.log"
    # the run proved something: work was acknowledged on both sides of the failover, and the
    # clients met the outage (typed, retriable errors) and carried on
    assert figures["acked_before_stall"] >= 5 and figures["acked_after_failover"] >= 5, figures
    assert figures["client_retries"] > 0, figures
    assert sum(figures["spanning_failover"].values()) > 0, figures
    assert result.report.stats["records_polled"] > 0


def test_asynchronous_standby_failover_loses_acknowledged_commits(failover_backend, s3_server, tmp_path):
    """The negative control: the same schedule against an asynchronous standby."""
    cluster, backend = failover_backend(False)
    assert cluster.replication_state() == ("streaming", "async")
    run, result, figures = _run(cluster, backend, tmp_path / "async", s3_server)
    summary = result.summary()
    print(json.dumps({"figures": figures, "anomalies": {k: v for k, v in summary["anomalies"].items() if v},
                      "exits": summary["exits"]}, default=str))
    assert figures["acked_during_stall"] > 0, figures  # the primary acknowledged what the standby lacked
    assert not result.report.ok
    assert result.report.counts["lost_write"] > 0, result.report.to_json()


def test_a_commit_waiting_for_the_standby_is_invisible_and_its_retry_resolves_it(failover_backend):
    """One commit caught by the failover, step by step: while it waits for the stalled
    standby, read_committed readers do not see it (Kafka's high watermark: nothing a
    failover could lose is readable); the primary dies, so its outcome is unknown: the
    producer's own retries give up with the retriable DatabaseUnavailableError, an abort
    is refused, and the commit retried once the standby is promoted commits it, once."""
    cluster, backend = failover_backend(True)
    broker = backend.connect(retry_budget_ms=5_000)  # the producer's own retries give up sooner
    try:
        broker.create_topic("t", partitions=2)
        producer = broker.producer(transactional_id="caught")
        producer.init_transactions()
        with producer.transaction():
            producer.send("t", [{"key": b"k", "value": b"first"}], partition=0)
            producer.send("t", [{"key": b"k", "value": b"first"}], partition=1)
        producer.begin_transaction()
        producer.send("t", [{"key": b"k", "value": b"second"}], partition=0)
        producer.send("t", [{"key": b"k", "value": b"second"}], partition=1)
        producer.flush()  # registered and replicated: only the commit is left

        cluster.stall_replication()
        outcome: list[BaseException | None] = []

        def commit() -> None:
            try:
                producer.commit_transaction()
                outcome.append(None)
            except BaseException as error:
                outcome.append(error)

        committer = threading.Thread(target=commit)
        committer.start()
        time.sleep(1.0)
        assert not outcome, "the commit returned although the standby has not got it"
        assert _values(broker) == [b"first", b"first"]  # waiting: invisible to readers
        ends = broker.end_offsets([TopicPartition("t", p) for p in range(2)], "read_committed")
        assert set(ends.values()) == {1}

        cluster.crash_primary()  # the commit's connection dies with it
        committer.join(timeout=60)
        assert outcome and isinstance(outcome[0], DatabaseUnavailableError), outcome
        assert outcome[0].retriable and "Connection refused" in str(outcome[0])
        with pytest.raises(IllegalStateError):
            producer.abort_transaction()  # it may have committed: only a retry is legal

        cluster.promote()
        producer.commit_transaction()  # the retry resolves it on the new primary
        assert _values(broker) == [b"first", b"first", b"second", b"second"]
        with producer.transaction():  # and the producer goes on
            producer.send("t", [{"key": b"k", "value": b"third"}], partition=0)
        assert _values(broker) == [b"first", b"first", b"second", b"second", b"third"]
        assert broker.describe_transaction("caught").state == "CompleteCommit"
        assert broker.fsck().problems == []
    finally:
        broker.close()


def _values(broker) -> list[bytes]:
    consumer = broker.consumer(isolation_level="read_committed")
    consumer.assign([TopicPartition("t", p) for p in range(2)])
    rows = []
    while batch := consumer.poll(max_records=100).to_pylist():
        rows += batch
    consumer.close()
    return sorted(r["value"] for r in rows)

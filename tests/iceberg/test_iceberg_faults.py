"""The publisher under faults, on both backends, as real processes: killed between
writing its files and committing (the table is unchanged, the files are orphans that gc
deletes once past the grace period), killed after committing (nothing published twice),
and SIGKILLed at random while transfers commit and abort, then restarted: no record
twice, none missing, every snapshot balanced."""

from __future__ import annotations

import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _bank import TOPIC, check_history, committed_rows, create, table_rows, transfer
from cli._cli import TXN_BROKER, cli_env

from txn_broker.iceberg.warehouse import find_warehouse_orphans

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BANK = Path(__file__).with_name("_bank.py")


def sync(backend, **faults: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(backend)
    if faults:
        env["TXN_BROKER_FAULTS"] = ",".join(f"{point}={action}" for point, action in faults.items())
    return subprocess.run([str(TXN_BROKER), "iceberg", "sync"], env=env, capture_output=True, text=True,
                          timeout=120)


def parquet_files(broker) -> set[str]:
    return {o.key for o in broker._store.list("iceberg/") if o.key.endswith(".parquet")}


def test_killed_before_commit_leaves_orphans_gc_deletes(backend):
    broker = backend.connect()
    create(broker)
    bank = broker.producer(transactional_id="bank")
    bank.init_transactions()
    for amount in (1, 2, 3):
        transfer(bank, amount)
    killed = sync(backend, **{"iceberg.after_write": "kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    table = broker.iceberg_table(TOPIC)
    assert table.current_snapshot() is None  # nothing committed
    orphans = parquet_files(broker)
    assert len(orphans) == 2  # one file per partition, in no snapshot

    kept = broker.gc(delete_delay_ms=0)  # within the default grace (a day): a publisher may still commit them
    assert kept.iceberg_orphans_within_grace >= 2 and kept.iceberg_orphans_deleted == 0
    assert parquet_files(broker) == orphans

    done = sync(backend)
    assert done.returncode == 0, done.stderr[-2000:]
    table = table.refresh()
    assert table_rows(table) == committed_rows(broker)
    report = broker.gc(orphan_grace_ms=0, delete_delay_ms=0)
    assert report.iceberg_orphans_deleted >= 2
    assert parquet_files(broker) == parquet_files(broker) - orphans  # the killed run's files are gone
    assert not parquet_files(broker) & orphans
    assert table_rows(table.refresh()) == committed_rows(broker)  # the table's own files are kept
    assert list(find_warehouse_orphans(broker._iceberg_publisher().catalog, broker._store, broker.now_ms())) == []

    transfer(bank, 4)
    after_commit = sync(backend, **{"iceberg.after_commit": "kill"})
    assert after_commit.returncode == -signal.SIGKILL
    again = sync(backend)
    assert again.returncode == 0, again.stderr[-2000:]
    table = table.refresh()
    assert len(table.snapshots()) == 2  # the killed run committed; the next had nothing to add
    assert table_rows(table) == committed_rows(broker)
    check_history(table)
    broker.close()


def test_publisher_sigkilled_at_random_resumes_exactly_once(backend):
    """A producer process commits and aborts transfers while `txn-broker iceberg run`
    publishes every 300 ms and is SIGKILLed at random moments, then restarted."""
    broker = backend.connect()
    create(broker, **{"iceberg.target.file.bytes": "2000"})  # several files per publish
    env = {**cli_env(backend)}
    producer = subprocess.Popen([sys.executable, str(BANK), "150", "7"], env=env, stderr=subprocess.PIPE, text=True)
    rng = random.Random(25)
    kills = 0
    try:
        while producer.poll() is None:
            publisher = subprocess.Popen([str(TXN_BROKER), "iceberg", "run", "--interval-ms", "300"], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # once it has published (a process start takes seconds on a loaded machine),
            # kill it at a random moment of its next rounds: reading, writing or committing
            ready, _, _ = select.select([publisher.stdout], [], [], 60)
            if ready:
                time.sleep(rng.uniform(0.0, 0.6))
            publisher.send_signal(signal.SIGKILL)
            _out, err = publisher.communicate(timeout=30)
            assert publisher.returncode == -signal.SIGKILL, err[-2000:]
            kills += ready != []
        assert producer.wait(timeout=120) == 0, producer.stderr.read()[-2000:] if producer.stderr else ""
        assert kills >= 2, "the publisher was not killed mid-run twice: the producer ended too soon"
    finally:
        if producer.poll() is None:
            producer.kill()
    final = broker.publish_iceberg()[0]
    table = broker.iceberg_table(TOPIC)
    assert table_rows(table) == committed_rows(broker)
    assert final.offsets == {tp.partition: o for tp, o in broker.end_offsets([(TOPIC, 0), (TOPIC, 1)]).items()}
    assert check_history(table) >= 2
    broker.close()

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
from _bank import TOPIC, check_history, committed_rows, create, open_bank, table_rows, transfer
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
    broker, bank = open_bank(backend)
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

    assert broker.publish_iceberg()[0].rows == 6  # the next publish takes it all, once
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
    assert broker.publish_iceberg()[0].snapshot_id is None  # the killed run had committed it all
    table = table.refresh()
    assert len(table.snapshots()) == 2  # the killed run committed; the next had nothing to add
    assert table_rows(table) == committed_rows(broker)
    check_history(table)
    broker.close()


def published_after_restart(broker) -> None:
    """One more transfer, committed after the restart (retried while the database comes
    back), reaches the table through the running publisher within 90 s."""
    from txn_broker.errors import TxnBrokerError

    deadline = time.monotonic() + 90
    while True:
        try:
            producer = broker.producer(transactional_id="after-restart")
            producer.init_transactions()
            transfer(producer, 1000)
            ends = {tp.partition: o for tp, o in broker.end_offsets([(TOPIC, 0), (TOPIC, 1)]).items()}
            break
        except TxnBrokerError as error:
            assert error.retriable and time.monotonic() < deadline, error
            time.sleep(0.5)
    while True:
        try:  # the test's own catalog connections died too: the first use after fails, retriable
            status = broker.iceberg_status([TOPIC])[0]
        except TxnBrokerError as error:
            assert error.retriable and time.monotonic() < deadline, error
            time.sleep(0.3)
            continue
        if all(p.published_offset >= ends[p.partition] for p in status.partitions):
            return
        assert time.monotonic() < deadline, "the publisher did not publish after PostgreSQL restarted"
        time.sleep(0.3)


def test_publisher_sigkilled_at_random_resumes_exactly_once(backend, request):
    """A producer process commits and aborts transfers while `txn-broker iceberg run`
    publishes every 300 ms and is SIGKILLed at random moments, then restarted. On the
    postgres backend, PostgreSQL is also restarted once mid-run (every connection of the
    producer, the publisher and its catalog dies): the publisher carries on."""
    pg = request.getfixturevalue("pg_server") if backend.name == "postgres" else None
    broker = backend.connect()
    create(broker, **{"iceberg.target.file.bytes": "2000"})  # several files per publish
    env = {**cli_env(backend)}
    rng = random.Random(25)
    for round_ in range(3):
        producer = subprocess.Popen([sys.executable, str(BANK), "25", str(round_)], env=env, stderr=subprocess.PIPE,
                                    text=True)
        publisher = subprocess.Popen([str(TXN_BROKER), "iceberg", "run", "--interval-ms", "300"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # once it has published (a process start takes seconds on a loaded machine), kill
            # it at a random moment of its next rounds: reading, writing or committing
            ready, _, _ = select.select([publisher.stdout], [], [], 90)
            if pg is not None and round_ == 1 and ready:
                pg.stop("fast")  # a restart: clients' connections are cut, commits kept
                pg.start()
                published_after_restart(broker)
            time.sleep(rng.uniform(0.0, 0.6))
        finally:
            publisher.send_signal(signal.SIGKILL)
            _out, err = publisher.communicate(timeout=30)
            producer.wait(timeout=120)
        assert ready, f"the publisher published nothing in 90 s: {err[-2000:]}"
        assert publisher.returncode == -signal.SIGKILL, err[-2000:]
        assert producer.returncode == 0, producer.stderr.read()[-2000:] if producer.stderr else ""
    final = broker.publish_iceberg()[0]
    table = broker.iceberg_table(TOPIC)
    assert table_rows(table) == committed_rows(broker)
    assert final.offsets == {tp.partition: o for tp, o in broker.end_offsets([(TOPIC, 0), (TOPIC, 1)]).items()}
    assert check_history(table) >= 2
    broker.close()

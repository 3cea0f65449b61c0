"""Publishing topics to Iceberg tables, on both backends: committed records only, every
snapshot a set of whole transactions (the bank workload sums to zero in each), the
table read by pyiceberg and by polars, two publishers at once, status and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest
import sqlalchemy as sa
from _bank import (
    SCHEMA,
    TOPIC,
    check_history,
    check_snapshot,
    committed_rows,
    create,
    open_bank,
    polars_storage_options,
    table_rows,
    transfer,
)

from txn_broker.errors import CorruptSegmentError
from txn_broker.faults import set_fault_hook
from txn_broker.log.field_ids import FIELD_ID_KEY

pytestmark = pytest.mark.integration


def test_snapshots_hold_whole_committed_transactions(backend, monkeypatch):
    """An open transaction on partition 0 holds that partition's last stable offset back
    while later transfers commit: the publish must leave them out of partition 1 too
    (the consistent cut), then take them once it ends. Aborted transfers never show."""
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    broker, bank = open_bank(backend)
    transfer(bank, 5)
    transfer(bank, 7, abort=True)
    hanging = broker.producer(transactional_id="hanging")
    hanging.init_transactions()
    hanging.begin_transaction()
    hanging.send(TOPIC, pa.table({"account": ["slow"], "amount": [0]}, schema=SCHEMA), partition=0)
    hanging.flush()  # registered: partition 0's last stable offset stops here
    for amount in (1, 2, 3):
        transfer(bank, amount)
    first = broker.publish_iceberg()
    assert [r.rows for r in first] == [2]  # the first transfer; the later ones wait in both partitions
    # each partition: the first transfer, the aborted one (which occupies an offset), and no
    # further: partition 1's last stable offset is 5, but its transfers are cut in partition 0
    assert first[0].offsets == {0: 2, 1: 2}, "a transfer cut by partition 0's open transaction was published"
    hanging.commit_transaction()
    transfer(bank, 9, abort=True)
    transfer(bank, 4)
    second = broker.publish_iceberg()
    assert second[0].rows == 9 and second[0].snapshot_id is not None
    assert broker.publish_iceberg()[0].snapshot_id is None  # nothing new: no snapshot

    table = broker.iceberg_table(TOPIC)
    assert check_history(table) == 2
    assert table_rows(table) == committed_rows(broker)
    summary = table.current_snapshot().summary.additional_properties
    ends = broker.end_offsets([(TOPIC, 0), (TOPIC, 1)])
    assert json.loads(summary["txn-broker.offsets"]) == {str(tp.partition): o for tp, o in ends.items()}

    # the columns keep their field ids: 2-4 for the metadata columns, the topic's from 5
    ids = {f.name: f.field_id for f in table.schema().fields}
    assert ids == {"_partition": 2, "_offset": 3, "_timestamp": 4, "account": 5, "amount": 6}
    import pyarrow.parquet as pq

    data_file = next(iter(table.scan().plan_files())).file.file_path
    with table.io.new_input(data_file).open() as stream:
        parquet_schema = pq.read_schema(stream)
    assert {f.name: int(f.metadata[FIELD_ID_KEY]) for f in parquet_schema} == ids

    import polars as pl

    frame = pl.scan_iceberg(table, storage_options=polars_storage_options(table)).collect()
    assert sorted(frame.select(["_partition", "_offset", "account", "amount"]).rows()) == committed_rows(broker)
    status = broker.iceberg_status()[0]
    assert [(p.published_offset, p.offsets_behind) for p in status.partitions] == [(ends[tp], 0) for tp in ends]
    broker.close()


def test_two_publishers_at_once_cannot_duplicate(backend):
    """Publisher A writes its files; before it commits, publisher B publishes the same
    records and commits first. A loses the commit, deletes its files, re-reads the
    table's offsets and publishes only what B left."""
    a, b = backend.connect(), backend.connect()
    create(a)
    bank = a.producer(transactional_id="bank")
    bank.init_transactions()
    for amount in range(1, 6):
        transfer(bank, amount)
    raced = []

    def b_commits_first(point: str) -> None:
        if point == "iceberg.after_write" and not raced:
            raced.append(True)
            transfer(bank, 100)  # committed after A's cut: A publishes it on its second attempt
            assert b.publish_iceberg()[0].rows == 12

    set_fault_hook(b_commits_first)
    try:
        result = a.publish_iceberg()[0]
    finally:
        set_fault_hook(None)
    assert result.attempts == 2 and result.rows == 0 and result.snapshot_id is None
    assert a.publish_iceberg()[0].rows == 0  # B took everything already
    table = a.iceberg_table(TOPIC)
    assert check_history(table) == 1
    assert table_rows(table) == committed_rows(a)
    # A's files of its lost attempt were deleted: only the table's own files remain
    referenced = {t.file.file_path for t in table.scan().plan_files()}
    stored = {f"{backend.storage_url.rstrip('/')}/{o.key}" for o in a._store.list("iceberg/")
              if o.key.endswith(".parquet")}
    assert stored == referenced
    a.close()
    b.close()


def test_cli_sync_and_status(backend):
    from cli._cli import run

    broker, bank = open_bank(backend)
    transfer(bank, 3)
    status = run(backend, "iceberg", "status", "--json").json()
    assert [(p["published_offset"], p["last_stable_offset"]) for p in status[0]["partitions"]] == [(0, 1), (0, 1)]
    assert run(backend, "iceberg", "sync", TOPIC, "--json").json()[0]["rows"] == 2
    table = run(backend, "iceberg", "status")
    assert "txn_broker.bank" in table.out and "SECONDS_BEHIND" in table.out
    assert "unknown topic" in run(backend, "iceberg", "sync", "nope", expect=2).err
    check_snapshot(broker.iceberg_table(TOPIC).scan().to_arrow())
    broker.close()


def test_import_txn_broker_does_not_import_pyiceberg(backend):
    """pyiceberg is imported only when a topic uses Iceberg: not by `import txn_broker`,
    nor by a broker whose topics do not (gc included)."""
    code = ("import sys, txn_broker; b = txn_broker.connect(); b.create_topic('plain'); b.gc(); "
            "assert 'pyiceberg' not in sys.modules, 'pyiceberg imported'")
    env = {**os.environ, **backend.env}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_retention_expires_whole_files_below_the_log_start(backend):
    """gc truncates the topic (retention.bytes); the next publish removes the data files
    whose records all lie below their partition's log start, in one snapshot that keeps
    the offsets; what the topic still has stays in the table."""
    broker = backend.connect()
    create(broker, **{"retention.bytes": "1"})
    bank = broker.producer(transactional_id="bank")
    bank.init_transactions()
    for round_ in range(3):  # three publishes: three files per partition
        for amount in (1, 2):
            transfer(bank, amount + 10 * round_)
        broker.publish_iceberg()
    table = broker.iceberg_table(TOPIC)
    before = table.current_snapshot()
    assert len(list(table.scan().plan_files())) == 6
    truncated = broker.gc(delete_delay_ms=0)
    assert truncated.retention_segments > 0
    starts = {tp.partition: o for tp, o in broker.beginning_offsets([(TOPIC, 0), (TOPIC, 1)]).items()}
    assert all(start > 0 for start in starts.values())
    result = broker.publish_iceberg()[0]
    assert result.expired_files > 0 and result.rows == 0
    table = table.refresh()
    expiry = table.current_snapshot()
    assert expiry.parent_snapshot_id == before.snapshot_id
    assert expiry.summary.additional_properties["txn-broker.offsets"] == \
        before.summary.additional_properties["txn-broker.offsets"]
    rows = table_rows(table)
    kept = set(rows)
    assert set(committed_rows(broker)) <= kept  # everything the topic still has
    for task in table.scan().plan_files():  # and no file wholly below its partition's log start
        partition = task.file.partition[0]
        offsets = [r[1] for r in rows if r[0] == partition]
        assert max(offsets) >= starts[partition]
    assert broker.publish_iceberg()[0].expired_files == 0  # nothing more to expire
    assert broker.fsck().ok
    broker.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the publisher's ranges, not the store
def test_deleted_records_are_expired_from_the_table_and_never_published(backend):
    """Broker.delete_records moves the log start (inside a published file on partition 1,
    past records not published yet on partition 0): the next publish removes the files
    wholly below it, publishes only what is left, and keeps a file that holds the log start."""
    broker, bank = open_bank(backend)
    for round_ in range(2):  # two publishes: files of offsets 0-1 and 2-3 per partition
        for amount in (1, 2):
            transfer(bank, amount + 10 * round_)
        broker.publish_iceberg()
    for amount in (21, 22):  # offsets 4-5, not published
        transfer(bank, amount)
    assert broker.delete_records(TOPIC, {0: -1, 1: 3}) == {0: 6, 1: 3}
    result = broker.publish_iceberg()[0]
    assert result.expired_files == 3
    rows = table_rows(broker.iceberg_table(TOPIC))
    assert [(r[0], r[1]) for r in rows] == [(1, 2), (1, 3), (1, 4), (1, 5)]
    assert set(committed_rows(broker)) == {r for r in rows if r[1] >= 3}
    assert broker.publish_iceberg()[0].expired_files == 0
    assert broker.fsck().ok
    broker.close()


def test_fsck_checks_the_table_against_the_topic(backend):
    broker, bank = open_bank(backend)
    transfer(bank, 1)
    broker.publish_iceberg()
    assert broker.fsck().ok
    [data_file] = [o.key for o in broker._store.list("iceberg/") if o.key.endswith(".parquet")][:1]
    broker._store.delete([data_file])
    report = broker.fsck()
    assert not report.ok
    assert [f.kind for f in report.problems] == ["iceberg_missing_file"]
    assert data_file in report.problems[0].message
    broker.close()


def test_small_files_are_rewritten_by_replace_snapshots(backend):
    """Publishing after every transfer leaves a small file per partition per publish; once
    a partition has enough of them, a replace snapshot swaps them for one file holding the
    same rows, and every snapshot still balances."""
    from txn_broker.iceberg.small_files import MIN_INPUTS

    broker, bank = open_bank(backend)
    for amount in range(1, MIN_INPUTS + 1):
        transfer(bank, amount)
        if amount == 3:
            transfer(bank, 99, abort=True)  # a gap in the offsets between two files
        result = broker.publish_iceberg()[0]
    assert result.rewritten_groups == 2  # one group per partition, on the last publish
    table = broker.iceberg_table(TOPIC)
    assert len(list(table.scan().plan_files())) == 2  # one file per partition
    rewrites = [s.summary.additional_properties.get("txn-broker.rewrite") for s in table.snapshots()]
    assert rewrites.count("replace") == 2 and rewrites[-1] == "replace"
    # the replace merged the manifests: a reader plans from one (pyiceberg's plain
    # overwrite would leave an added and a deleted-entries manifest per rewritten group)
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) == 1
    assert (manifests[0].added_files_count, manifests[0].existing_files_count) == (1, 1)
    replaced = table.current_snapshot().summary.additional_properties["txn-broker.offsets"]
    assert replaced == table.snapshots()[-3].summary.additional_properties["txn-broker.offsets"]
    assert table_rows(table) == committed_rows(broker)
    check_history(table)

    # the history: snapshots are kept (5 days by default) until the topic says otherwise;
    # then the publisher expires them and gc deletes the small files only they needed
    small = {t.file.file_path for s in table.snapshots() for t in table.scan(snapshot_id=s.snapshot_id).plan_files()}
    assert len(small) == 2 * MIN_INPUTS + 2
    assert broker.gc(orphan_grace_ms=0, delete_delay_ms=0).iceberg_orphans_deleted == 0  # all retained
    broker.alter_topic(TOPIC, config={"iceberg.snapshot.max.age.ms": 1, "iceberg.snapshot.min.keep": 2})
    result = broker.publish_iceberg()[0]
    assert result.snapshot_id is None and result.expired_snapshots == len(table.snapshots()) - 2
    table = table.refresh()
    assert [s.snapshot_id for s in table.snapshots()] == [s.snapshot_id for s in table.metadata.snapshots][-2:]
    assert table.current_snapshot().summary.additional_properties["txn-broker.offsets"] == replaced
    cleaned = broker.gc(orphan_grace_ms=0, delete_delay_ms=0)
    # the small files the two kept snapshots do not hold: the rewrite's inputs, except the
    # last publish's (the kept append before the second replace holds them)
    live = {t.file.file_path for s in table.snapshots() for t in table.scan(snapshot_id=s.snapshot_id).plan_files()}
    assert cleaned.iceberg_orphans_deleted >= len(small - live) > 0
    left = {o.key.rsplit("/", 1)[-1] for o in broker._store.list("iceberg/")}
    assert not {p.rsplit("/", 1)[-1] for p in small - live} & left, "a file no kept snapshot needs is still there"
    assert {p.rsplit("/", 1)[-1] for p in live} <= left
    assert table_rows(table.refresh()) == committed_rows(broker)
    check_history(table)
    assert broker.fsck().ok
    # publishing resumes from the merged snapshot's offsets: no record twice, none skipped
    transfer(bank, 100)
    assert broker.publish_iceberg()[0].snapshot_id is not None
    table = table.refresh()
    assert table_rows(table) == committed_rows(broker)
    assert len(table.current_snapshot().manifests(table.io)) == 2  # a fast append adds one
    broker.gc(orphan_grace_ms=0, delete_delay_ms=0)  # what this publish's expiry left
    assert table_rows(table.refresh()) == committed_rows(broker)
    assert broker.fsck().ok
    broker.close()


def test_manifest_merge_can_be_turned_off_per_table(backend):
    """A table whose ``commit.manifest-merge.enabled`` is ``false`` keeps pyiceberg's own
    overwrite manifests: the rewrite's added file and its deleted entries apart."""
    from txn_broker.iceberg.small_files import MIN_INPUTS

    broker, bank = open_bank(backend)
    transfer(bank, 1)
    broker.publish_iceberg()
    table = broker.iceberg_table(TOPIC)
    with table.transaction() as txn:
        txn.set_properties({"commit.manifest-merge.enabled": "false"})
    for amount in range(2, MIN_INPUTS + 1):
        transfer(bank, amount)
        result = broker.publish_iceberg()[0]
    assert result.rewritten_groups == 2
    table = table.refresh()
    manifests = table.current_snapshot().manifests(table.io)
    counts = sorted((m.added_files_count, m.deleted_files_count) for m in manifests)
    assert counts == [(0, MIN_INPUTS)] * 2 + [(1, 0)] * 2
    assert table_rows(table) == committed_rows(broker)
    assert broker.fsck().ok
    broker.close()


@pytest.mark.parametrize("threads", ["2", "1"])
def test_partitions_written_at_once_commit_the_cut_or_nothing(backend, threads):
    """With iceberg.publish.threads=2 (the default) the publisher reads and writes two
    partitions at once; with 1, one after another. A segment that cannot be read in one of
    them fails the publish with the reader's typed error: no snapshot, and the files the
    other partitions had already stored are deleted. Once the segment is readable again,
    one snapshot holds exactly the cut of every partition."""
    broker = backend.connect()
    broker.create_topic("wide", partitions=4, schema=SCHEMA,
                        config={"iceberg.enabled": "true", "iceberg.publish.threads": threads})
    producer = broker.producer(transactional_id="wide")
    producer.init_transactions()
    for amount in range(1, 4):  # each transaction over all four partitions, summing to zero
        with producer.transaction():
            for p, value in enumerate((-3 * amount, amount, amount, amount)):
                producer.send("wide", pa.table({"account": ["acct"], "amount": [value]}, schema=SCHEMA),
                              partition=p)
    table = broker.iceberg_table("wide")
    with broker._db.engine.connect() as conn:
        key = conn.execute(sa.text(
            "SELECT s.object_key FROM segments s JOIN topics t ON t.topic_id = s.topic_id "
            "WHERE t.name = 'wide' AND s.partition_no = 3 ORDER BY s.base_offset")).scalars().first()
    original = broker._store.get(key)
    broker._store.put(key, b"not a segment")
    with pytest.raises(CorruptSegmentError):
        broker.publish_iceberg(["wide"])
    assert broker.iceberg_table("wide").current_snapshot() is None
    stored = [o.key for o in broker._store.list("iceberg/") if o.key.endswith(".parquet")]
    assert stored == [], "files of the failed publish were left behind"

    broker._store.put(key, original)
    published = broker.publish_iceberg(["wide"])[0]
    ends = broker.end_offsets([("wide", p) for p in range(4)])
    assert published.offsets == {tp.partition: o for tp, o in ends.items()} and published.files == 4
    table = broker.iceberg_table("wide")
    assert len(table.snapshots()) == 1
    rows = table.scan().to_arrow()
    assert sum(rows.column("amount").to_pylist()) == 0 and rows.num_rows == 12
    assert sorted(zip(rows.column("_partition").to_pylist(), rows.column("_offset").to_pylist(), strict=True)) == [
        (p, o) for p in range(4) for o in range(3)]
    broker.close()


def test_cached_transaction_sees_every_staged_change(backend):
    """The publisher's transaction computes the table metadata once per change: a change
    staged in it, and the table's own commit, are seen at the next read, as with
    pyiceberg's own transaction."""
    from txn_broker.iceberg.transaction import transaction

    broker = backend.connect()
    create(broker)
    table = broker.iceberg_table(TOPIC)
    txn = transaction(table)
    first = txn.table_metadata
    assert txn.table_metadata is first  # computed once while nothing changes
    txn.set_properties({"txn-broker.test": "staged"})
    assert txn.table_metadata.properties["txn-broker.test"] == "staged"
    txn.commit_transaction()
    assert broker.iceberg_table(TOPIC).properties["txn-broker.test"] == "staged"
    with transaction(table) as again:  # ``table`` was updated in place by the commit
        assert again.table_metadata.properties["txn-broker.test"] == "staged"
        again.set_properties({"txn-broker.test": "second"})
    assert broker.iceberg_table(TOPIC).properties["txn-broker.test"] == "second"
    broker.close()


def test_small_file_check_reads_no_manifest_while_no_group_is_possible(backend):
    """After a publish, the small-file rewrite plans the table's files only when the
    current snapshot's totals allow a group (MIN_INPUTS files, or about the target size)."""
    from txn_broker.iceberg.small_files import MIN_INPUTS, could_rewrite

    broker, bank = open_bank(backend)
    transfer(bank, 1)
    broker.publish_iceberg()
    table = broker.iceberg_table(TOPIC)
    summary = table.current_snapshot().summary
    files, size = int(summary["total-data-files"]), int(summary["total-files-size"])
    assert files == 2 < MIN_INPUTS
    assert not could_rewrite(table, target_bytes=size * 10)  # 2 files, far below the target
    assert could_rewrite(table, target_bytes=size)  # together about the target: a group may be due
    broker.close()


def test_small_files_with_another_writers_delete_files_are_left_alone(backend):
    """The publisher writes no delete files; an engine that does (Spark, Trino: position
    deletes) removes rows the data files still hold. A rewrite reads data files whole, so
    it would bring those rows back: a table with delete files is not rewritten, and the
    rows stay deleted while publishing goes on."""
    from _iceberg_foreign import add_position_deletes

    from txn_broker.iceberg.small_files import MIN_INPUTS, partition_files

    broker, bank = open_bank(backend)
    for amount in range(1, MIN_INPUTS):  # one file short of a rewrite per partition
        transfer(bank, amount)
        assert broker.publish_iceberg()[0].rewritten_groups == 0
    table = broker.iceberg_table(TOPIC)
    first = partition_files(table)[0][0]
    table = add_position_deletes(table, first, [0])
    deleted = (0, 0, "acct", -1)  # partition 0's first row: the debit of the first transfer
    assert deleted in committed_rows(broker) and deleted not in table_rows(table)

    transfer(bank, MIN_INPUTS)
    result = broker.publish_iceberg()[0]
    assert result.snapshot_id is not None and result.rewritten_groups == 0
    table = table.refresh()
    assert len(partition_files(table)[0]) == MIN_INPUTS  # the group a rewrite would have merged
    rows = table_rows(table)
    assert deleted not in rows and sorted([*rows, deleted]) == committed_rows(broker)
    broker.close()

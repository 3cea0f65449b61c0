"""Segment compaction on both backends (txn_broker/compaction.py, docs/semantics.md
"Compaction"): what read_committed readers see is unchanged, record for record and column
for column; aborted records are gone; the object count drops; concurrent retention, gc
purges, compactors, producers and consumers lose and duplicate nothing; a crash before
the swap leaves an orphan only, after it the old objects queued; fsck stays clean."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from txn_broker import READ_UNCOMMITTED, TopicPartition
from txn_broker.faults import InjectedFault, set_fault_hook
from txn_broker.log.keys import SEGMENT_PREFIX

pytestmark = pytest.mark.integration

CONFIG = {"min.compaction.lag.ms": 0}


def _write(broker, topic: str, transactions: int, *, partitions: int = 2, first: int = 0,
           abort_every: int = 4, tid: str = "w") -> None:
    """``transactions`` transactions of 3 records into each partition (headers on some),
    every ``abort_every``-th aborted, then a few idempotent sends."""
    p = broker.producer(transactional_id=tid)
    p.init_transactions()
    for t in range(first, first + transactions):
        p.begin_transaction()
        for part in range(partitions):
            p.send(topic, [{"key": f"k{t}".encode(), "value": f"v{t}-{part}-{i}".encode(),
                            "headers": {"h": f"{t}".encode()} if i == 1 else None} for i in range(3)],
                   partition=part)
        if t % abort_every == abort_every - 1:
            p.flush()  # stored, then aborted
            p.abort_transaction()
        else:
            p.commit_transaction()
    p.close()
    idem = broker.producer()
    for part in range(partitions):
        idem.send(topic, [{"key": None, "value": f"plain-{first}-{part}".encode(), "headers": None}], partition=part)
    idem.flush()
    idem.close()


def _read_all(broker, topic: str, partitions: int = 2, isolation: str = "read_committed",
              max_records: int | None = None) -> pa.Table:
    consumer = broker.consumer(isolation_level=isolation)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    parts = []
    while True:
        got = consumer.poll(max_records=max_records)
        if not got.num_rows:
            break
        parts.append(got)
    consumer.close()
    table = pa.concat_tables(parts)
    return table.sort_by([("_partition", "ascending"), ("_offset", "ascending")])


def _objects(broker) -> set[str]:
    return {o.key for o in broker._store.list(SEGMENT_PREFIX)}


def test_compaction_keeps_every_committed_record_and_drops_aborted_ones(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, config=CONFIG)
    _write(broker, "t", 12)
    before = _read_all(broker, "t")
    before_uncommitted = _read_all(broker, "t", isolation=READ_UNCOMMITTED)
    objects_before = _objects(broker)
    assert before.num_rows == 2 * (9 * 3 + 1) and before_uncommitted.num_rows == 2 * (12 * 3 + 1)

    report = broker.compact(["t"])
    assert report.segments_written == 2 and report.conflicts == 0
    assert report.segments_replaced == len(objects_before) == 2 * 13
    assert report.records == before.num_rows and report.aborted_records_dropped == 2 * 3 * 3

    after = _read_all(broker, "t")
    assert after.equals(before)  # every column: offsets, timestamps, keys, values, headers
    assert after.column("headers").to_pylist() == before.column("headers").to_pylist()
    # read_uncommitted: the aborted records are gone with the segments that held them
    assert _read_all(broker, "t", isolation=READ_UNCOMMITTED).equals(before)
    # read in small polls, across the gaps
    assert _read_all(broker, "t", max_records=4).equals(before)

    # the old objects stay until gc's delete delay passes, for readers in flight
    assert _objects(broker) >= objects_before
    broker.gc(delete_delay_ms=0, orphan_grace_ms=10**9)
    assert len(_objects(broker)) == 2
    assert broker.fsck().to_dict()["ok"] and not broker.fsck().warnings
    assert _read_all(broker, "t").equals(before)
    described = broker.describe_topic("t")
    assert [p.high_watermark for p in described.partitions] == [37, 37]

    # seeking into a gap (an aborted transaction's offsets) reads from the next record
    consumer = broker.consumer()
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    consumer.seek(tp, 9)  # transaction 3 (offsets 9..11) was aborted
    got = consumer.poll(max_records=2)
    assert got.column("_offset").to_pylist() == [12, 13]
    consumer.close()

    # compacting again changes nothing: one segment per partition, nothing to merge
    assert broker.compact().segments_written == 0
    # the last transaction keeps its entries (offsets, counts, markers), its segments gone
    described_txn = broker.describe_transaction("w")
    assert [(p.partition, p.first_offset, p.marker) for p in described_txn.partitions] == [
        (0, 33, "ABORT"), (1, 33, "ABORT")]  # transaction 11 was aborted
    assert described_txn.segments == []


def test_new_segments_merge_with_a_compacted_one_and_gaps_stay_gaps(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, config=CONFIG)
    _write(broker, "t", 6)
    broker.compact()
    _write(broker, "t", 6, first=6, tid="w2")
    before = _read_all(broker, "t")
    report = broker.compact()
    assert report.segments_written == 2 and report.segments_replaced == 2 * (1 + 7)
    assert _read_all(broker, "t").equals(before)
    offsets = _read_all(broker, "t").filter(pc.equal(pc.field("_partition"), 0)).column("_offset").to_pylist()
    assert not {9, 10, 11} & set(offsets) and 12 in offsets  # transaction 3 of the first batch stays a gap
    assert broker.fsck().ok


def test_young_segments_big_segments_and_open_transactions_are_left_alone(backend):
    broker = backend.connect()
    broker.create_topic("young", config={"min.compaction.lag.ms": 3_600_000})
    broker.create_topic("t", config={**CONFIG, "segment.bytes": 1})
    broker.create_topic("open", config=CONFIG)
    for topic in ("young", "t"):
        _write(broker, topic, 3, partitions=1, tid=f"w-{topic}")
    _write(broker, "open", 3, partitions=1, tid="w-open")
    stuck = broker.producer(transactional_id="stuck", transaction_timeout_ms=600_000)
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.send("open", [{"key": None, "value": b"open", "headers": None}], partition=0)
    stuck.flush()
    _write(broker, "open", 3, partitions=1, first=3, tid="w-open")  # after the open transaction
    report = broker.compact()
    assert report.topics == ["open"]
    # the open transaction holds the last stable offset at 10: only what lies below merges
    assert report.segments_replaced == 4
    assert broker.compact(["young"], min_age_ms=0).segments_written == 1  # the override
    stuck.abort_transaction()
    assert broker.compact(["open"]).segments_written == 1
    assert broker.fsck().ok


def test_small_segments_are_sized_by_their_records_not_their_objects(backend):
    """Case 10's shape: small segments whose objects are mostly IPC framing and schema.
    Their stored bytes add up to twice ``segment.bytes``, their records to much less: they
    merge into one segment, not two."""
    broker = backend.connect()
    broker.create_topic("t", partitions=1, config=CONFIG)
    _write(broker, "t", 20, partitions=1, abort_every=1000)
    stored = broker.describe_topic("t").partitions[0].size_bytes
    broker.alter_topic("t", config={"segment.bytes": stored // 2})
    before = _read_all(broker, "t", partitions=1)
    report = broker.compact(["t"])
    assert (report.segments_replaced, report.segments_written) == (21, 1)
    assert report.bytes_written < stored // 2
    assert _read_all(broker, "t", partitions=1).equals(before)


def test_a_concurrent_purge_retention_or_compactor_makes_the_swap_refuse(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=1, config=CONFIG)
    _write(broker, "t", 8, partitions=1)
    before = _read_all(broker, "t", partitions=1)
    objects = _objects(broker)
    other = backend.connect()
    interfere = iter([
        lambda: other.gc(delete_delay_ms=10**9, orphan_grace_ms=10**9, compact=False),  # purges the aborted ones
        lambda: other.compact(),  # a second compactor swaps first
    ])
    outcomes = []

    def hook(point: str) -> None:
        if point == "rewrite.before_swap":
            step = next(interfere, None)
            if step is not None:
                set_fault_hook(None)
                outcomes.append(step())
                set_fault_hook(hook)

    set_fault_hook(hook)
    try:
        first = broker.compact()
        assert first.conflicts == 1 and first.segments_written == 0
        assert _objects(broker) == objects  # the refused output was deleted, nothing else changed
        second = broker.compact()
        assert second.conflicts == 1 and second.segments_written == 0
        assert outcomes[1].segments_written == 1
    finally:
        set_fault_hook(None)
    assert broker.compact().segments_written == 0
    assert _read_all(broker, "t", partitions=1).equals(before)

    # retention truncating into the group while it is written: refused too
    broker.create_topic("r", partitions=1, config={**CONFIG, "retention.ms": 1})
    _write(broker, "r", 4, partitions=1, tid="wr")

    def truncate(point: str) -> None:
        if point == "rewrite.before_swap":
            set_fault_hook(None)
            assert other.gc(delete_delay_ms=10**9, compact=False).retention_segments > 0

    set_fault_hook(truncate)
    try:
        assert broker.compact(["r"]).conflicts == 1
    finally:
        set_fault_hook(None)
    assert broker.fsck().ok


def test_crash_before_the_swap_leaves_an_orphan_and_after_it_the_old_objects_queued(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=1, config=CONFIG)
    _write(broker, "t", 5, partitions=1)
    broker.gc(delete_delay_ms=0, compact=False)  # the aborted transaction's object goes first
    before = _read_all(broker, "t", partitions=1)
    objects = _objects(broker)

    def crash_at(wanted: str):
        def hook(point: str) -> None:
            if point == wanted:
                raise InjectedFault(f"crash at {point}")
        return hook

    set_fault_hook(crash_at("rewrite.before_swap"))
    try:
        with pytest.raises(InjectedFault):
            broker.compact()
    finally:
        set_fault_hook(None)
    (orphan,) = _objects(broker) - objects
    fsck = broker.fsck()
    assert fsck.ok and [w.object_key for w in fsck.warnings] == [orphan]
    assert _read_all(broker, "t", partitions=1).equals(before)
    broker.gc(orphan_grace_ms=0, delete_delay_ms=0, compact=False)
    assert _objects(broker) == objects

    set_fault_hook(crash_at("rewrite.after_swap"))
    try:
        with pytest.raises(InjectedFault):
            broker.compact()
    finally:
        set_fault_hook(None)
    assert _read_all(broker, "t", partitions=1).equals(before)
    fsck = broker.fsck()
    assert fsck.ok and not fsck.warnings  # the old objects are queued, not orphans
    assert broker.gc(delete_delay_ms=0, compact=False).objects_deleted == len(objects)
    assert len(_objects(broker)) == 1


def test_readers_in_flight_producers_and_compactors_lose_and_duplicate_nothing(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, config=CONFIG)
    _write(broker, "t", 10)
    expected = _read_all(broker, "t")
    reader = broker.consumer()
    reader.assign([TopicPartition("t", p) for p in range(2)])
    first = reader.poll(max_records=7)  # mid-read: its plan names the old segments

    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            _write(backend.connect(), "t", 6, first=100, tid="late")
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    def compactor() -> None:
        other = backend.connect()
        try:
            while not stop.is_set():
                other.compact()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    threads = [threading.Thread(target=produce)] + [threading.Thread(target=compactor) for _ in range(2)]
    for t in threads:
        t.start()
    threads[0].join()
    stop.set()
    for t in threads[1:]:
        t.join()
    assert not errors
    broker.compact()
    rest = []
    while True:
        got = reader.poll(max_records=5)
        if not got.num_rows:
            break
        rest.append(got)
    reader.close()
    seen = pa.concat_tables([first, *rest]).sort_by([("_partition", "ascending"), ("_offset", "ascending")])
    full = _read_all(broker, "t")
    assert [(r["_partition"], r["_offset"]) for r in seen.select(["_partition", "_offset"]).to_pylist()] == [
        (r["_partition"], r["_offset"]) for r in full.select(["_partition", "_offset"]).to_pylist()]
    assert seen.equals(full)
    assert full.slice(0, 0).schema == expected.schema
    assert full.filter(pc.less(pc.field("_offset"), 31)).equals(expected)  # 10 transactions, 1 send
    assert full.num_rows == expected.num_rows + 2 * (5 * 3 + 1)  # 6 more, one of them aborted
    # gc deletes the old objects while a reader planned on them: it plans again
    broker.gc(delete_delay_ms=0, orphan_grace_ms=10**9)
    assert broker.fsck().ok
    assert _read_all(broker, "t").equals(full)


def test_compaction_configs_are_checked(backend):
    from txn_broker.errors import InvalidConfigError, UnknownTopicOrPartitionError

    broker = backend.connect()
    for bad in ({"segment.bytes": 0}, {"min.compaction.lag.ms": -1}, {"segment.bytes": "big"}):
        with pytest.raises(InvalidConfigError):
            broker.create_topic("bad", config=bad)
    broker.create_topic("t", config={"segment.bytes": "1048576"})
    assert broker.describe_topic("t").config["segment.bytes"] == 1048576
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.compact(["nope"])


def test_the_semantics_page_example_runs(tmp_path):
    """docs/semantics.md's Compaction example, as printed, in an empty directory."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "semantics.md").read_text()
    section = text.split("## Compaction", 1)[1]
    (block,) = re.findall(r"^```python\n(.*?)^```", section.split("\n## ", 1)[0], flags=re.S | re.M)
    script = tmp_path / "example.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_consistent_cut_still_sees_the_transactions_a_compacted_segment_holds(backend):
    """The Spark source's atomic end and the Iceberg publisher's snapshots lower an end to
    a transaction's first offset and then look for the transactions past it: in a
    compacted segment they are found by their partition entries."""
    from txn_broker.log.cut import atomic_ends

    broker = backend.connect()
    broker.create_topic("cut", partitions=3, config=CONFIG)
    rec = [{"key": None, "value": b"r", "headers": None}]
    hanging = broker.producer(transactional_id="open")
    hanging.init_transactions()
    hanging.begin_transaction()
    hanging.send("cut", rec, partition=0)
    hanging.flush()  # holds partition 0's last stable offset at 0
    writer = broker.producer(transactional_id="legs")
    writer.init_transactions()
    for legs in ((0, 1), (1, 2), (1,), (1,)):  # T: partitions 0 and 1; T2: 1 and 2; then more of 1
        with writer.transaction():
            for p in legs:
                writer.send("cut", rec * 2, partition=p)
    assert broker.compact(["cut"]).segments_written == 1  # partition 1's four segments
    topic_id = broker._topics.get("cut").topic_id
    ranges = {(topic_id, 0): (0, 0), (topic_id, 1): (0, 8), (topic_id, 2): (0, 2)}
    ends = broker._db.read(lambda tx: atomic_ends(tx, ranges))
    # T leaves partition 1 (its end lowered to 0), so T2 must leave partition 2 too
    assert ends == {(topic_id, 0): 0, (topic_id, 1): 0, (topic_id, 2): 0}
    hanging.abort_transaction()

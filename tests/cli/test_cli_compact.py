"""``txn-broker compact`` through the console script on both backends: the table, --json,
--dry-run, unknown topics, and a SIGKILL at each step of a merge (before the swap: only an
orphan; after it: the old objects queued; the records unchanged, fsck clean)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from _cli import cli_env, error_line, run, run_json

from txn_broker import TopicPartition
from txn_broker.log.keys import SEGMENT_PREFIX

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("v", pa.int64())])
COMPACT_KEYS = {"dry_run", "partitions_checked", "partitions_compacted", "segments_written", "segments_replaced",
                "bytes_replaced", "bytes_written", "records", "aborted_records_dropped", "conflicts", "topics"}


def _fill(broker, topic: str, transactions: int) -> None:
    p = broker.producer(transactional_id=f"fill.{topic}")
    p.init_transactions()
    for t in range(transactions):
        p.begin_transaction()
        p.send(topic, [{"v": t * 10 + i} for i in range(3)], partition=0)
        p.flush()
        if t % 3 == 2:
            p.abort_transaction()
        else:
            p.commit_transaction()
    p.close()


def _records(broker, topic: str) -> list[tuple[int, int]]:
    consumer = broker.consumer()
    consumer.assign([TopicPartition(topic, 0)])
    out = []
    while (batch := consumer.poll(max_records=1000)).num_rows:
        out += list(zip(batch.column("_offset").to_pylist(), batch.column("v").to_pylist(), strict=True))
    consumer.close()
    return out


def _objects(broker) -> set[str]:
    return {o.key for o in broker._store.list(SEGMENT_PREFIX)}


def test_compact_prints_a_table_and_json(backend):
    broker = backend.connect()
    for topic in ("a", "b"):
        broker.create_topic(topic, schema=SCHEMA, config={"min.compaction.lag.ms": 0})
        _fill(broker, topic, 6)
    before = _records(broker, "a")

    dry = run_json(backend, "compact", "a", "--dry-run")
    assert set(dry) == COMPACT_KEYS and dry["dry_run"] and dry["segments_replaced"] == 6
    assert _records(broker, "a") == before and len(_objects(broker)) == 12

    table = run(backend, "compact", "a").out
    assert "segments merged" in table and "aborted records dropped" in table
    assert _records(broker, "a") == before
    done = run_json(backend, "compact")  # every topic: only b is left to do
    assert done["topics"] == ["b"] and done["segments_replaced"] == 6 and done["aborted_records_dropped"] == 6
    assert done["records"] == 12

    gc = run_json(backend, "gc", "--delete-delay-ms", "0")
    assert gc["compacted_segments"] == 0 and gc["objects_deleted"] == 12
    assert len(_objects(broker)) == 2
    assert broker.fsck().ok

    assert "unknown topic" in error_line(run(backend, "compact", "nope", expect=2))


def test_gc_compacts_unless_told_not_to(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA, config={"min.compaction.lag.ms": 0})
    _fill(broker, "t", 4)
    first = run_json(backend, "gc", "--no-compact")
    assert first["aborted_segments"] == 1 and first["compacted_segments"] == 0
    report = broker.gc()
    # the purged aborted segment is merged too, as a gap
    assert report.compacted_segments == 4 and report.compaction_outputs == 1


@pytest.mark.parametrize("point", ["rewrite.before_swap", "rewrite.after_swap"])
def test_a_kill_at_each_step_of_a_merge_loses_nothing(backend, point):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA, config={"min.compaction.lag.ms": 0})
    _fill(broker, "t", 5)
    before, objects = _records(broker, "t"), _objects(broker)
    killed = run(backend, "compact", env=cli_env(backend, TXN_BROKER_FAULTS=f"{point}=kill"), expect=None)
    assert killed.code == -9
    assert _records(broker, "t") == before
    fsck = broker.fsck()
    assert fsck.ok
    new = _objects(broker) - objects
    assert len(new) == 1
    if point == "rewrite.before_swap":  # written, never registered: an orphan, nothing else
        assert [w.object_key for w in fsck.warnings] == list(new)
        assert broker.compact().segments_written == 1  # the next run does the merge
    else:  # swapped: the old objects are queued, not orphans
        assert not fsck.warnings
        assert broker.gc(delete_delay_ms=0).objects_deleted == len(objects)
    assert _records(broker, "t") == before
    assert broker.fsck().ok

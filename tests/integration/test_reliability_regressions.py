"""Regressions found by the reliability work (docs/reliability.md): each is a real fault
(the storage directory made unwritable or unreadable for a while), not a mock.

1. A flush whose upload failed with a retriable storage error lost the buffered records:
   they were taken out of the buffer before the upload and not kept for the retry, so
   retrying flush() or commit_transaction() (what a retriable error asks for) answered
   success without them, and the next batch hit a sequence gap.
2. A poll that failed part-way (one partition's segment could not be read) had already
   moved the positions of the partitions read before it, so their records were skipped.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from txn_broker import TopicPartition
from txn_broker.errors import StorageUnavailableError

pytestmark = pytest.mark.integration


def local_root(broker) -> Path:
    return Path(broker._store.root)


class Unwritable:
    """Make the segment directory unwritable even for root: replace it with a file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.saved = root.with_name(root.name + ".saved")

    def __enter__(self) -> Unwritable:
        if self.root.exists():
            self.root.rename(self.saved)
        self.root.write_bytes(b"not a directory")
        return self

    def heal(self) -> None:
        self.root.unlink()
        if self.saved.exists():
            self.saved.rename(self.root)

    def __exit__(self, *exc: object) -> None:
        if self.root.is_file():
            self.heal()


def read_all(broker, topic, isolation="read_committed"):
    consumer = broker.consumer(isolation_level=isolation)
    consumer.subscribe([topic])
    rows = []
    while batch := consumer.poll(max_records=1000).to_pylist():
        rows += batch
    return rows


@pytest.fixture
def sqlite_broker(tmp_path):
    import txn_broker

    # the producer gives up on the unwritable directory after 2 s of retries (default: 30 s)
    broker = txn_broker.connect(f"sqlite:///{tmp_path}/b.db", (tmp_path / "segments").as_uri(),
                                retry_budget_ms=2_000)
    yield broker
    broker.close()


def test_flush_retried_after_a_failed_upload_keeps_the_records(sqlite_broker):
    broker = sqlite_broker
    broker.create_topic("t", partitions=1)
    producer = broker.producer()
    producer.send("t", [{"key": b"k", "value": b"first"}], partition=0)
    with Unwritable(local_root(broker)) as fault:
        with pytest.raises(StorageUnavailableError) as info:
            producer.flush()
        assert info.value.retriable
        fault.heal()
    results = producer.flush()  # the retry the error asked for
    assert [(r.partition, r.base_offset, r.record_count) for r in results] == [(0, 0, 1)]
    producer.send("t", [{"key": b"k", "value": b"second"}], partition=0)
    producer.flush()  # no sequence gap
    assert [r["value"] for r in read_all(broker, "t")] == [b"first", b"second"]


def test_commit_retried_after_a_failed_upload_commits_every_record(sqlite_broker):
    broker = sqlite_broker
    broker.create_topic("t", partitions=2)
    producer = broker.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", [{"key": b"a", "value": b"a"}], partition=0)
    producer.send("t", [{"key": b"b", "value": b"b"}], partition=1)
    with Unwritable(local_root(broker)) as fault:
        with pytest.raises(StorageUnavailableError):
            producer.commit_transaction()
        fault.heal()
    appends = producer.commit_transaction()
    assert sorted((a.partition, a.record_count) for a in appends) == [(0, 1), (1, 1)]
    assert sorted(r["value"] for r in read_all(broker, "t")) == [b"a", b"b"]


def test_abort_after_a_failed_upload_frees_the_sequence_numbers(sqlite_broker):
    broker = sqlite_broker
    broker.create_topic("t", partitions=1)
    producer = broker.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", [{"key": b"a", "value": b"lost"}], partition=0)
    with Unwritable(local_root(broker)) as fault:
        with pytest.raises(StorageUnavailableError):
            producer.flush()
        fault.heal()
    producer.abort_transaction()
    with producer.transaction():
        producer.send("t", [{"key": b"b", "value": b"kept"}], partition=0)
    assert [r["value"] for r in read_all(broker, "t")] == [b"kept"]


def test_failed_poll_does_not_skip_records(sqlite_broker):
    broker = sqlite_broker
    broker.create_topic("t", partitions=2)
    producer = broker.producer()
    for p in (0, 1):
        producer.send("t", [{"key": b"k", "value": f"p{p}".encode()}], partition=p)
    producer.flush()
    consumer = broker.consumer(isolation_level="read_uncommitted")
    consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
    segment = next((local_root(broker) / "topics").glob("*/1/*.arrow"))
    saved = segment.with_name("saved")
    segment.rename(saved)
    segment.mkdir()  # reading a directory: an OSError, a retriable storage error
    with pytest.raises(StorageUnavailableError):
        consumer.poll(max_records=10)
    segment.rmdir()
    saved.rename(segment)
    rows = consumer.poll(max_records=10).to_pylist()
    assert sorted(r["value"] for r in rows) == [b"p0", b"p1"]
    assert consumer.position(TopicPartition("t", 0)) == consumer.position(TopicPartition("t", 1)) == 1


def test_unwritable_helper_restores_the_directory(tmp_path):
    root = tmp_path / "segments"
    (root / "x").mkdir(parents=True)
    with Unwritable(root):
        assert root.is_file()
    assert (root / "x").is_dir()
    shutil.rmtree(root)

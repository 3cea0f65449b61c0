"""Writing an object through the store's writer (what the producer encodes segments into):
published whole on success, nothing visible after a failure, and what a killed writer
leaves behind is an orphan that gc removes. On both backends."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from _procs import worker_env

from txn_broker.errors import StorageUnavailableError
from txn_broker.log.segment_format import decode_segment
from txn_broker.storage import open_store

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("v", pa.int64())])


def _keys(store, prefix="topics/"):
    return sorted(o.key for o in store.list(prefix))


def test_writer_publishes_the_object_whole_when_the_block_ends(backend):
    store = open_store(backend.storage_url)
    with store.writer("topics/1/0/a.arrow") as sink:
        sink.write(b"hello ")
        sink.write(pa.py_buffer(b"world"))
        assert store.head("topics/1/0/a.arrow") is None  # nothing visible under the key yet
    assert store.get("topics/1/0/a.arrow") == b"hello world"
    assert _keys(store) == ["topics/1/0/a.arrow"]  # no temporary file left beside it


@pytest.mark.parametrize("failure", [RuntimeError("an encoder's bug"), OSError(28, "No space left on device")])
def test_a_failed_write_leaves_nothing_visible(backend, failure):
    store = open_store(backend.storage_url)
    store.put("topics/1/0/kept.arrow", b"kept")
    expected = StorageUnavailableError if isinstance(failure, OSError) and backend.name == "sqlite" else type(failure)
    with pytest.raises(expected):
        with store.writer("topics/1/0/failed.arrow") as sink:
            sink.write(b"half of a segment")
            raise failure
    assert store.head("topics/1/0/failed.arrow") is None
    assert _keys(store) == ["topics/1/0/kept.arrow"]  # the temporary file was removed too


def test_a_producer_writes_segments_through_the_writer(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="w")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", pa.table({"v": list(range(1000))}), partition=0)
    [key] = _keys(broker._store)
    assert decode_segment(broker._store.get_buffer(key)).column("v").to_pylist() == list(range(1000))
    registered = broker._db.run(lambda tx: tx.raw("SELECT object_key, size_bytes FROM segments").all())
    assert [tuple(r) for r in registered] == [(key, broker._store.head(key).size)]  # its size as written


_KILLED_AFTER_WRITE = """
    import os, txn_broker
    broker = txn_broker.connect(os.environ["TXN_BROKER_DATABASE_URL"], os.environ["TXN_BROKER_STORAGE_URL"])
    producer = broker.producer(transactional_id="killed")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", [{"v": v} for v in range(100)], partition=0)
    producer.commit_transaction()  # killed once the segment is written, before it is registered
"""

_KILLED_DURING_WRITE = """
    import os, signal, sys
    from txn_broker.storage import open_store
    store = open_store(os.environ["TXN_BROKER_STORAGE_URL"])
    with store.writer(sys.argv[1]) as sink:
        sink.write(b"x" * 100_000)
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _run_killed(backend, script, *args, faults=None):
    extra = {"TXN_BROKER_FAULTS": faults} if faults else {}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=worker_env(backend, extra),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]


def test_a_producer_killed_between_write_and_registration_leaves_an_orphan_gc_removes(backend):
    broker = backend.connect()
    topic_id = broker.create_topic("t", schema=SCHEMA).topic_id
    _run_killed(backend, _KILLED_AFTER_WRITE, faults="produce.after_upload=kill")
    [orphan] = _keys(broker._store)
    assert orphan.startswith(f"topics/{topic_id}/0/") and orphan.endswith(".arrow")
    assert broker.gc(orphan_grace_ms=60_000).orphans_within_grace == 1  # young: kept
    assert broker.gc(orphan_grace_ms=0).orphans_deleted == 1
    assert _keys(broker._store) == []
    successor = broker.producer(transactional_id="killed")
    successor.init_transactions()  # aborts what the killed instance opened
    assert broker.describe_topic("t").partitions[0].high_watermark == 0


def test_a_writer_killed_mid_write_never_leaves_a_visible_object(backend):
    broker = backend.connect()
    topic_id = broker.create_topic("t", schema=SCHEMA).topic_id
    key = f"topics/{topic_id}/0/half.arrow"
    _run_killed(backend, _KILLED_DURING_WRITE, key)
    assert broker._store.head(key) is None
    left = _keys(broker._store)
    # a local directory keeps the temporary file (an S3 PUT that never completed leaves nothing)
    assert len(left) == (1 if backend.name == "sqlite" else 0)
    assert broker.gc(orphan_grace_ms=0).orphans_deleted == len(left)
    assert _keys(broker._store) == []

"""The object store layer on both kinds, and unreachable database or storage."""

from __future__ import annotations

import pytest

import txn_broker
from txn_broker.errors import DatabaseUnavailableError, StorageUnavailableError
from txn_broker.storage import ObjectNotFoundError, open_store

pytestmark = pytest.mark.integration


def test_store_round_trip(backend):
    store = open_store(backend.storage_url)
    store.put("topics/1/0/a.arrow", b"hello")
    store.put("topics/1/0/b.arrow", b"world!")
    store.put("other/c", b"x")
    assert store.get("topics/1/0/a.arrow") == b"hello"
    assert store.head("topics/1/0/b.arrow").size == 6
    assert store.head("missing") is None
    assert sorted(o.key for o in store.list("topics/")) == ["topics/1/0/a.arrow", "topics/1/0/b.arrow"]
    store.delete(["topics/1/0/a.arrow", "never-existed"])
    with pytest.raises(ObjectNotFoundError):
        store.get("topics/1/0/a.arrow")
    store.put("topics/1/0/b.arrow", b"world!")  # idempotent re-put of the same object
    assert store.get("topics/1/0/b.arrow") == b"world!"


def test_local_store_never_exposes_partial_objects(tmp_path):
    store = open_store((tmp_path / "s").as_uri())
    store.put("k/x", b"1" * 10_000)
    assert [o.key for o in store.list()] == ["k/x"]  # no temporary file left behind
    assert not list((tmp_path / "s" / "k").glob(".tmp-*"))


def test_unreachable_s3_is_a_retriable_storage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    from txn_broker.storage.s3 import S3ObjectStore

    store = S3ObjectStore("bucket", "p", retry_budget_ms=100)
    with pytest.raises(StorageUnavailableError) as info:
        store.put("k", b"data")
    assert info.value.retriable
    broker = txn_broker.connect(f"sqlite:///{tmp_path}/b.db", "s3://bucket/p", retry_budget_ms=500)
    broker._store = store
    broker.create_topic("t")
    producer = broker.producer()
    producer.send("t", [{"key": b"k", "value": b"v"}])
    with pytest.raises(StorageUnavailableError):
        producer.flush()
    # nothing was registered: no reader can see a segment whose object is missing
    assert broker.describe_topic("t").partitions[0].high_watermark == 0


def test_unreachable_database_is_retriable_and_masks_the_password(tmp_path):
    url = "postgresql+psycopg2://app:s3cret-pw@127.0.0.1:9/broker"
    with pytest.raises(DatabaseUnavailableError) as info:
        txn_broker.connect(url, (tmp_path / "s").as_uri())
    assert info.value.retriable
    assert "s3cret-pw" not in str(info.value) and "***" in str(info.value)


def test_unsupported_urls_are_config_errors(tmp_path):
    from txn_broker.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError):
        txn_broker.connect("mysql://u:p@h/db", (tmp_path / "s").as_uri())
    with pytest.raises(InvalidConfigError):
        txn_broker.connect(f"sqlite:///{tmp_path}/b.db", "ftp://x/y")


def test_get_buffer_hands_out_the_object_and_survives_its_deletion(backend):
    import pyarrow as pa

    store = open_store(backend.storage_url)
    store.put("topics/1/0/m.arrow", pa.py_buffer(b"mapped segment"))  # put takes Arrow buffers too
    buffer = store.get_buffer("topics/1/0/m.arrow")
    assert isinstance(buffer, pa.Buffer) and buffer.to_pybytes() == b"mapped segment"
    store.delete(["topics/1/0/m.arrow"])  # gc deletes an object a reader still holds
    assert buffer.to_pybytes() == b"mapped segment"
    with pytest.raises(ObjectNotFoundError):
        store.get_buffer("topics/1/0/m.arrow")

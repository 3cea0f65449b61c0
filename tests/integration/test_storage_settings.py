"""Storage settings are passed explicitly (``connect(storage_options=...)``), never through
the process environment: two brokers with different S3 endpoints and credentials work
side by side in one process. And a caller hears of an outage of the database or of the
storage after a bounded wait (``retry_budget_ms``), as the typed retriable error."""

from __future__ import annotations

import os
import time
import uuid

import pyarrow as pa
import pytest
from _servers import AWS_TEST_ENV, PostgresServer, S3Server

import txn_broker
from txn_broker.errors import (
    DatabaseUnavailableError,
    InvalidConfigError,
    StoragePermissionError,
    StorageUnavailableError,
)
from txn_broker.migrations import upgrade
from txn_broker.storage import open_store

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("k", pa.string())])
ENV_NAMES = ("TXN_BROKER_S3_ENDPOINT_URL", *AWS_TEST_ENV, "AWS_SESSION_TOKEN", "AWS_PROFILE")


@pytest.fixture(scope="module")
def other_s3():
    """A second S3 endpoint: a bucket of one server does not exist on the other."""
    server = S3Server()
    yield server
    server.close()


@pytest.fixture
def no_storage_environment(monkeypatch):
    """Nothing in the environment could point a store anywhere or sign its requests."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _access_key(store) -> str:  # type: ignore[no-untyped-def]
    return store._client._request_signer._credentials.access_key  # type: ignore[no-any-return]


def test_two_brokers_with_their_own_endpoints_and_credentials_in_one_process(
        s3_server, other_s3, no_storage_environment, tmp_path):  # type: ignore[no-untyped-def]
    secrets = {name: f"secret-{name}-{uuid.uuid4().hex}" for name in ("a", "b")}
    servers = {"a": s3_server, "b": other_s3}
    buckets = {name: server.new_bucket() for name, server in servers.items()}
    environ_before = dict(os.environ)
    brokers = {
        name: txn_broker.connect(
            f"sqlite:///{tmp_path}/{name}.db", f"s3://{buckets[name]}/segments",
            storage_options={"endpoint_url": servers[name].endpoint_url, "region_name": "us-east-1",
                             "aws_access_key_id": f"key-{name}", "aws_secret_access_key": secrets[name],
                             "addressing_style": "path"})
        for name in ("a", "b")
    }
    try:
        for broker in brokers.values():
            broker.create_topic("t", partitions=1, schema=SCHEMA)
        producers = {name: b.producer(transactional_id=f"p-{name}") for name, b in brokers.items()}
        consumers = {name: b.consumer() for name, b in brokers.items()}
        for name, producer in producers.items():
            producer.init_transactions()
            consumers[name].assign([("t", 0)])
        for i in range(3):  # interleaved: a, b, a, b ... each to its own store
            for name, producer in producers.items():
                with producer.transaction():
                    producer.send("t", [{"k": f"{name}{i}"}], partition=0)
                assert consumers[name].poll(max_records=10).column("k").to_pylist() == [f"{name}{i}"]
        for name, broker in brokers.items():
            assert _access_key(broker._store) == f"key-{name}"
            objects = servers[name].client().list_objects_v2(Bucket=buckets[name]).get("Contents", [])
            assert len(objects) == 3  # three segments, each in its own broker's bucket and server
            other = "b" if name == "a" else "a"
            with pytest.raises(Exception, match="NoSuchBucket"):  # not on the other endpoint
                servers[other].client().list_objects_v2(Bucket=buckets[name])
            assert secrets[name] not in repr(broker) + repr(broker._store)
        assert dict(os.environ) == environ_before  # nothing was written to the environment
        assert not any(secret in value for value in os.environ.values() for secret in secrets.values())
    finally:
        for broker in brokers.values():
            broker.close()


def test_an_option_left_unset_falls_back_to_the_process_not_to_another_broker(
        s3_server, no_storage_environment, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    with_keys = open_store(f"s3://{s3_server.new_bucket()}/p", endpoint_url=s3_server.endpoint_url,
                           aws_access_key_id="key-explicit", aws_secret_access_key="secret-explicit",
                           region_name="us-east-1")
    with_keys.put("x", b"1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key-of-the-process")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-of-the-process")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    without = open_store(f"s3://{s3_server.new_bucket()}/p", endpoint_url=s3_server.endpoint_url)
    without.put("x", b"2")
    assert _access_key(without) == "key-of-the-process"  # boto3's own chain, never "key-explicit"
    assert _access_key(with_keys) == "key-explicit"
    assert with_keys.options()["aws_access_key_id"] == "key-explicit"
    assert "aws_access_key_id" not in without.options()


def test_storage_options_are_checked_without_echoing_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfigError, match="unknown storage option.*aws_secret_key") as info:
        open_store("s3://bucket/p", aws_secret_key="Hidden-Value")
    assert "Hidden-Value" not in str(info.value)
    with pytest.raises(InvalidConfigError, match="both aws_access_key_id and aws_secret_access_key"):
        open_store("s3://bucket/p", aws_access_key_id="k")
    with pytest.raises(InvalidConfigError, match="addressing_style"):
        open_store("s3://bucket/p", addressing_style="sideways")
    local = open_store((tmp_path / "s").as_uri(), endpoint_url="http://ignored", region_name="")
    assert local.options() == {}
    with pytest.raises(InvalidConfigError, match="unknown storage option"):
        txn_broker.connect(f"sqlite:///{tmp_path}/b.db", (tmp_path / "s").as_uri(), storage_options={"nope": "1"})


# -- outages: a bounded wait, then the typed retriable error --------------------------------------------

BUDGET_MS = 3_000
SLACK_S = 5.0


@pytest.fixture
def own_pg():
    server = PostgresServer()
    yield server
    server.close()


def test_a_database_outage_reaches_the_caller_within_the_budget(own_pg, tmp_path):  # type: ignore[no-untyped-def]
    url = own_pg.new_database("broker")
    upgrade(url)
    broker = txn_broker.connect(url, (tmp_path / "s").as_uri(), retry_budget_ms=BUDGET_MS)
    try:
        broker.create_topic("t", schema=SCHEMA)
        producer = broker.producer(transactional_id="outage")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", [{"k": "x"}], partition=0)
        own_pg.stop("fast")
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError) as info:
            producer.flush()
        waited = time.monotonic() - started
        assert info.value.retriable
        assert BUDGET_MS / 1000 / 2 < waited < BUDGET_MS / 1000 + SLACK_S, waited  # retried, then bounded
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError):
            broker.list_topics()  # an admin call: no retry of an outage (outcome-safe calls only)
        assert time.monotonic() - started < SLACK_S
    finally:
        own_pg.start()
        broker.close()


def test_a_storage_outage_reaches_the_caller_within_the_budget(tmp_path):  # type: ignore[no-untyped-def]
    s3 = S3Server()
    try:
        bucket = s3.new_bucket()
        broker = txn_broker.connect(
            f"sqlite:///{tmp_path}/b.db", f"s3://{bucket}/segments", retry_budget_ms=BUDGET_MS,
            storage_options={"endpoint_url": s3.endpoint_url, "aws_access_key_id": "k",
                             "aws_secret_access_key": "s", "region_name": "us-east-1"})
    finally:
        s3.close()  # the storage is gone
    try:
        broker.create_topic("t", schema=SCHEMA)
        producer = broker.producer()
        producer.send("t", [{"k": "x"}], partition=0)
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError) as info:
            producer.flush()
        waited = time.monotonic() - started
        assert info.value.retriable
        assert BUDGET_MS / 1000 / 2 < waited < BUDGET_MS / 1000 + SLACK_S, waited
        assert broker.describe_topic("t").partitions[0].high_watermark == 0
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError):  # a store call on its own: the same budget
            broker._store.get("topics/none")
        assert BUDGET_MS / 1000 / 2 < time.monotonic() - started < BUDGET_MS / 1000 + SLACK_S
    finally:
        broker.close()


def test_a_store_that_refuses_the_request_fails_at_once(s3_server, tmp_path):  # type: ignore[no-untyped-def]
    """Wrong settings (here a bucket the endpoint does not have) are not an outage: the
    error is fatal StoragePermissionError, raised without spending the retry budget."""
    broker = txn_broker.connect(
        f"sqlite:///{tmp_path}/b.db", f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/segments",
        retry_budget_ms=30_000,
        storage_options={"endpoint_url": s3_server.endpoint_url, "aws_access_key_id": "k",
                         "aws_secret_access_key": "s", "region_name": "us-east-1"})
    try:
        broker.create_topic("t", schema=SCHEMA)
        producer = broker.producer()
        producer.send("t", [{"k": "x"}], partition=0)
        started = time.monotonic()
        with pytest.raises(StoragePermissionError, match="NoSuchBucket") as info:
            producer.flush()
        assert info.value.fatal and not info.value.retriable
        assert time.monotonic() - started < SLACK_S
        assert broker.describe_topic("t").partitions[0].high_watermark == 0
    finally:
        broker.close()


def test_s3_puts_are_signed_and_large_ones_carry_a_crc32_checksum(s3_server):  # type: ignore[no-untyped-def]
    """The store's light client settings (txn_broker/storage/s3.py): a small object is
    protected by its signed SHA-256, an object above a mebibyte also by a CRC32 checksum
    that S3 verifies and keeps; both read back intact."""
    from txn_broker.storage.s3 import _CHECKSUM_BYTES

    bucket = s3_server.new_bucket()
    store = open_store(f"s3://{bucket}/p", endpoint_url=s3_server.endpoint_url, aws_access_key_id="testing",
                       aws_secret_access_key="testing", region_name="us-east-1")
    small, large = os.urandom(10_000), os.urandom(_CHECKSUM_BYTES + 1)
    store.put("small", small)
    store.put("large", large)
    assert store.get("small") == small and store.get("large") == large
    client = s3_server.client()
    heads = {key: client.head_object(Bucket=bucket, Key=f"p/{key}", ChecksumMode="ENABLED")
             for key in ("small", "large")}
    assert "ChecksumCRC32" in heads["large"] and "ChecksumCRC32" not in heads["small"]

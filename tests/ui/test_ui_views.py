"""What the page shows, computed from a real broker on both backends (``views.py``, no
Airflow): transaction rows with their DAG and task, ages and outcomes, the detail of a
transaction, topics with their last stable offsets, consumer groups with their lag."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest
from txn_broker_airflow.ui import views

from txn_broker import TopicPartition, strip_userinfo

pytestmark = pytest.mark.ui

SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64())])


def _rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"order_id": f"o-{i}", "amount": float(i)} for i in range(start, start + n)]


@pytest.mark.parametrize(("tid", "known", "expected"), [
    ("etl.load", [], ("etl", "load", None, False)),
    ("etl.group.load", ["etl"], ("etl", "group.load", None, True)),
    ("my.dag.load.3", ["my", "my.dag"], ("my.dag", "load", 3, True)),   # longest known DAG id wins
    ("my.dag.load.3", [], ("my", "dag.load", 3, False)),               # unknown: split at the first dot
    ("etl.load.x3", ["etl"], ("etl", "load.x3", None, True)),
    ("standalone", ["standalone"], (None, None, None, False)),
    (".hidden", [], (None, None, None, False)),
    ("<b>.x", [], ("<b>", "x", None, False)),
])
def test_attribution(tid: str, known: list[str], expected: tuple[Any, ...]) -> None:
    a = views.attribute(tid, known)
    assert (a.dag_id, a.task_id, a.map_index, a.dag_known) == expected


def test_strip_userinfo() -> None:
    assert strip_userinfo("s3://bucket/prefix") == "s3://bucket/prefix"
    assert strip_userinfo("http://key:secret@minio:9000/x") == "http://minio:9000/x"
    assert "secret" not in strip_userinfo("https://key:secret@host/")


def test_transaction_rows_detail_and_filters(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    try:
        broker.create_topic("raw", partitions=1, schema=SCHEMA)
        broker.create_topic("clean", partitions=2, schema=SCHEMA)
        seed = broker.producer(transactional_id="etl.ingest")
        seed.init_transactions()
        with seed.transaction():
            seed.send("raw", _rows(6), partition=0)

        clean = broker.producer(transactional_id="etl.clean")
        clean.init_transactions()
        with clean.transaction():
            clean.send("clean", _rows(3), partition=0)
            clean.send("clean", _rows(2, 3), partition=1)
            clean.send_offsets_to_transaction({TopicPartition("raw", 0): 6}, "etl.clean")
        # a new instance of the same id: a new epoch, Empty again, the last outcome still shown
        broker.producer(transactional_id="etl.clean").init_transactions()

        aborted = broker.producer(transactional_id="etl.publish.2")
        aborted.init_transactions()
        aborted.begin_transaction()
        aborted.send("clean", _rows(1, 10), partition=1)
        aborted.flush()
        broker.abort_transaction("etl.publish.2")

        fresh = broker.producer(transactional_id="etl.fresh")
        fresh.init_transactions()

        hanging = broker.producer(transactional_id="etl.stuck", transaction_timeout_ms=1)
        hanging.init_transactions()
        hanging.begin_transaction()
        hanging.send("clean", _rows(2, 20), partition=0)
        hanging.flush()
        deadline = time.monotonic() + 30
        while not broker.find_hanging_transactions() and time.monotonic() < deadline:
            time.sleep(0.01)

        data = views.list_transactions(broker, ["etl"])
        rows = {r["transactional_id"]: r for r in data["transactions"]}
        assert data["transactions"][0]["transactional_id"] == "etl.stuck"  # hanging first
        assert data["hanging_count"] == data["open_count"] == 1 and data["total"] == 5
        c = rows["etl.clean"]
        assert (c["dag_id"], c["task_id"], c["dag_known"], c["state"], c["outcome"]) == (
            "etl", "clean", True, "Empty", "committed")
        assert (c["partition_count"], c["record_count"], c["producer_epoch"]) == (2, 5, 1)
        assert isinstance(c["size_bytes"], int) and c["size_bytes"] > 0 and c["end_ms"] is not None
        a = rows["etl.publish.2"]
        assert (a["task_id"], a["map_index"], a["state"], a["outcome"]) == ("publish", 2, "CompleteAbort", "aborted")
        assert rows["etl.fresh"]["outcome"] is None and rows["etl.fresh"]["record_count"] == 0
        s = rows["etl.stuck"]
        assert s["hanging"] and s["open"] and s["outcome"] == "open" and s["age_ms"] > s["timeout_ms"] == 1

        assert {r["transactional_id"] for r in views.list_transactions(
            broker, states=["CompleteAbort", "Ongoing"])["transactions"]} == {"etl.publish.2", "etl.stuck"}
        assert [r["transactional_id"] for r in views.list_transactions(broker, text="PUBLISH")["transactions"]] == [
            "etl.publish.2"]
        assert views.list_transactions(broker, dag_id="other")["transactions"] == []
        assert [r["transactional_id"] for r in views.list_transactions(broker, hanging_only=True)["transactions"]] == [
            "etl.stuck"]
        limited = views.list_transactions(broker, limit=2)
        assert limited["truncated"] and len(limited["transactions"]) == 2 and limited["total"] == 5

        d = views.transaction_detail(broker, "etl.clean", ["etl"])
        assert [(p["topic"], p["partition"], p["first_offset"], p["last_offset"], p["marker"])
                for p in d["partitions"]] == [("clean", 0, 0, 2, "COMMIT"), ("clean", 1, 0, 1, "COMMIT")]
        assert d["group_offsets"] == [{"group_id": "etl.clean", "topic": "raw", "partition": 0, "offset": 6}]
        assert sum(s["record_count"] for s in d["segments"]) == 5
        assert [h["to_state"] for h in d["history"]] == [
            "Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Empty"]
        assert d["outcome"] == "committed" and not d["open"] and [t["outcome"] for t in d["transactions"]] == [
            "committed"]
        stuck = views.transaction_detail(broker, "etl.stuck")
        assert stuck["open"] and stuck["hanging"] and stuck["transactions"][0]["outcome"] == "open"
        assert views.transaction_detail(broker, "etl.publish.2")["history"][-1]["reason"] == (
            "aborted by an administrator")
        hanging.abort_transaction()
    finally:
        broker.close()


def test_topics_groups_and_task_instances(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    try:
        broker.create_topic("orders", partitions=2, schema=SCHEMA)
        done = broker.producer(transactional_id="shop.load")
        done.init_transactions()
        with done.transaction():
            done.send("orders", _rows(4), partition=0)
        broker.commit_offsets("readers", {TopicPartition("orders", 0): 1})

        held = broker.producer(transactional_id="shop.publish.0")
        held.init_transactions()
        held.begin_transaction()
        held.send("orders", _rows(3, 10), partition=0)
        held.flush()

        topic = views.topic_detail(broker, "orders", ["shop"])
        p0, p1 = topic["partitions"]
        first_open = broker.describe_transaction("shop.publish.0").partitions[0].first_offset
        assert (p0["last_stable_offset"], p0["lso_lag"]) == (first_open, p0["high_watermark"] - first_open)
        assert p0["lso_lag"] >= 3 and p0["segment_count"] == 2 and isinstance(p0["size_bytes"], int)
        assert (p1["high_watermark"], p1["last_stable_offset"], p1["lso_lag"], p1["records"]) == (0, 0, 0, 0)
        [holder] = topic["open_transactions"]
        assert (holder["transactional_id"], holder["dag_id"], holder["task_id"], holder["map_index"]) == (
            "shop.publish.0", "shop", "publish", 0)
        assert holder["partitions"] == [{"partition": 0, "first_offset": first_open,
                                         "last_offset": first_open + 2, "record_count": 3}]
        assert [f["name"] for f in topic["schema"]] == ["order_id", "amount"]
        broker.alter_topic("orders", schema=pa.schema([*SCHEMA, ("note", pa.string())]), by="deploy")
        versions = views.topic_detail(broker, "orders")["schema_versions"]  # newest first, with who
        assert [(v["version"], v["created_by"], v["columns"][-1]) for v in versions] == [
            (2, "deploy", "note string"), (1, versions[1]["created_by"], "amount double")]
        assert views.topic_detail(broker, "orders")["schema"][-1] == {
            "name": "note", "type": "string", "nullable": True, "id": 7}
        [listed] = views.list_topics(broker)["topics"]
        assert (listed["name"], listed["lso_lag"], listed["held_partitions"]) == ("orders", p0["lso_lag"], 1)

        group = views.group_detail(broker, "readers")
        [gp] = group["partitions"]
        assert (gp["committed_offset"], gp["lag"], gp["lag_uncommitted"]) == (
            1, first_open - 1, p0["high_watermark"] - 1)
        [g] = views.list_groups(broker)["groups"]
        assert (g["group_id"], g["topics"], g["lag"]) == ("readers", ["orders"], first_open - 1)
        # the same lag, and lag in seconds, as the exporter's (read after the views: ages grow)
        [exported] = [f for f in broker.metrics_figures().groups if f.group == "readers"]
        assert (exported.topic, exported.partition, exported.lag) == ("orders", 0, gp["lag"])
        assert group["lag_seconds"] == gp["lag_seconds"]
        assert 0 <= gp["lag_seconds"] <= g["lag_seconds"] <= exported.lag_seconds < gp["lag_seconds"] + 30

        held.commit_transaction()
        after = views.topic_detail(broker, "orders")
        assert after["partitions"][0]["lso_lag"] == 0 and after["open_transactions"] == []

        ti = views.task_instance_transaction(broker, "shop", "publish", 0)
        assert (ti["transactional_id"], ti["exists"]) == ("shop.publish.0", True)
        whole = views.task_instance_transaction(broker, "shop", "publish", None)
        assert (whole["transactional_id"], whole["exists"], whole["candidates"]) == (
            "shop.publish", False, ["shop.publish.0"])
    finally:
        broker.close()


def test_topics_show_their_iceberg_tables_behind_the_last_stable_offsets(backend) -> None:  # type: ignore[no-untyped-def]
    """The figures of ``txn-broker iceberg status`` (Broker.iceberg_status) per topic and
    partition: published offset, last stable offset, offsets and seconds behind."""
    from txn_broker import TopicSpec

    broker = backend.connect()
    try:
        broker.ensure_topics([TopicSpec("lake", 2, SCHEMA, {"iceberg.enabled": "true"}), TopicSpec("plain", 1, SCHEMA)])
        producer = broker.producer(transactional_id="lake.ingest")
        producer.init_transactions()
        with producer.transaction():
            producer.send("lake", _rows(3), partition=0)
        broker.publish_iceberg(["lake"])
        with producer.transaction():
            producer.send("lake", _rows(2, 3), partition=0)
            producer.send("lake", _rows(4, 5), partition=1)

        listed = {t["name"]: t for t in views.list_topics(broker)["topics"]}
        detail = views.topic_detail(broker, "lake")
        [status] = broker.iceberg_status(["lake"])  # after the views: seconds behind only grow
        assert listed["plain"]["iceberg"] is None and views.topic_detail(broker, "plain")["partitions"][0][
            "iceberg"] is None
        assert (detail["iceberg"]["table"], detail["iceberg"]["snapshot_id"]) == (status.table, status.snapshot_id)
        shown = {p["partition"]: p["iceberg"] for p in detail["partitions"]}
        for part in status.partitions:
            row = shown[part.partition]
            assert (row["published_offset"], row["last_stable_offset"], row["offsets_behind"]) == (
                part.published_offset, part.last_stable_offset, part.offsets_behind)
            assert row["seconds_behind"] <= part.seconds_behind < row["seconds_behind"] + 30
        assert [(shown[p]["published_offset"], shown[p]["offsets_behind"]) for p in (0, 1)] == [(3, 2), (0, 4)]
        assert shown[0]["seconds_behind"] > 0
        assert listed["lake"]["iceberg"]["offsets_behind"] == 6
        assert listed["lake"]["iceberg"]["seconds_behind"] <= status.seconds_behind
    finally:
        broker.close()

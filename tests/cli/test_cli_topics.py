"""``txn-broker topics ...`` through the console script, on both backends."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from _cli import error_line, run, run_json

from txn_broker.config import Settings
from txn_broker.topic_configs import TOPIC_CONFIGS

pytestmark = pytest.mark.integration

PARTITION_KEYS = {"partition", "log_start_offset", "high_watermark", "last_stable_offset", "segments", "size_bytes"}
TOPIC_KEYS = {"name", "topic_id", "created_ms", "config", "schema", "schema_version", "schema_versions",
              "partitions"}


def test_topics_create_list_describe_delete(backend, tmp_path):
    created = run_json(backend, "topics", "create", "orders", "--partitions", "3",
                       "--schema", "order_id:string not null,amount:float64,ts:timestamp[ms, tz=UTC]",
                       "--config", "retention.ms=86400000", "retention.bytes=1000000")
    assert set(created) == TOPIC_KEYS
    # every key, at its default unless given
    defaults = {name: config.default_for(Settings()) for name, config in TOPIC_CONFIGS.items()}
    assert created["config"] == {**defaults, "retention.ms": 86400000, "retention.bytes": 1000000}
    assert defaults["max.message.bytes"] == 1048588 and defaults["compression.type"] == "zstd"
    assert defaults["schema.compatibility"] == "BACKWARD"
    assert created["schema"] == {"fields": [  # field ids from 5 (docs/semantics.md, "Schema evolution")
        {"name": "order_id", "type": "string", "nullable": False, "id": 5},
        {"name": "amount", "type": "double", "nullable": True, "id": 6},
        {"name": "ts", "type": "timestamp[ms, tz=UTC]", "nullable": True, "id": 7},
    ]}
    assert created["schema_version"] == 1
    assert [v["version"] for v in created["schema_versions"]] == [1]
    assert created["schema_versions"][0]["fields"] == created["schema"]["fields"]
    assert [p["partition"] for p in created["partitions"]] == [0, 1, 2]
    assert all(set(p) == PARTITION_KEYS for p in created["partitions"])

    # describe --json's schema is a --schema-file: the schema round-trips
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(created["schema"]))
    human = run(backend, "topics", "create", "orders_copy", "--partitions", "1", "--schema-file", str(schema_file))
    assert human.out.strip() == "Created topic orders_copy with 1 partition."
    run(backend, "topics", "create", "raw", "--partitions", "2")  # Kafka's key/value/headers schema

    broker = backend.connect()
    assert broker.describe_topic("orders_copy").schema.equals(broker.describe_topic("orders").schema)
    assert broker.describe_topic("orders").schema.field("order_id").nullable is False
    producer = broker.producer()
    producer.send("orders", [{"order_id": "a", "amount": 1.0}, {"order_id": "b", "amount": 2.0}], partition=1)
    producer.flush()

    listing = run_json(backend, "topics", "list")
    assert [t["name"] for t in listing["topics"]] == ["orders", "orders_copy", "raw"]
    orders = listing["topics"][0]
    assert set(orders) == {"name", "topic_id", "partition_count", "records", "segments", "size_bytes", "config"}
    assert (orders["partition_count"], orders["records"], orders["segments"]) == (3, 2, 1)
    table = run(backend, "topics", "list").out.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITIONS", "RECORDS", "SEGMENTS", "BYTES", "RETENTION_MS",
                                "RETENTION_BYTES"]
    assert table[1].split()[:4] == ["orders", "3", "2", "1"]

    described = run_json(backend, "topics", "describe", "orders")
    p1 = described["partitions"][1]
    assert (p1["log_start_offset"], p1["high_watermark"], p1["last_stable_offset"], p1["segments"]) == (0, 2, 2, 1)
    assert p1["size_bytes"] > 0
    text = run(backend, "topics", "describe", "orders").out
    assert "retention.ms=86400000" in text
    header = next(ln for ln in text.splitlines() if ln.startswith("PARTITION"))
    assert header.split() == ["PARTITION", "LOG_START_OFFSET", "HIGH_WATERMARK", "LAST_STABLE_OFFSET",
                              "SEGMENTS", "BYTES"]
    row = text.splitlines()[text.splitlines().index(header) + 2].split()
    assert row[:5] == ["1", "0", "2", "2", "1"]

    assert run_json(backend, "topics", "delete", "orders_copy") == {"deleted": "orders_copy"}
    assert run(backend, "topics", "delete", "raw").out.strip() == "Deleted topic raw."
    assert [t["name"] for t in run_json(backend, "topics", "list")["topics"]] == ["orders"]


def test_topics_errors(backend, tmp_path):
    backend.connect().create_topic("t")
    cases = [
        (["topics", "describe", "nope"], "error: unknown topic 'nope'"),
        (["topics", "create", "t", "--partitions", "2"], "error: topic 't' already exists"),
        (["topics", "create", "u", "--partitions", "1", "--schema", "id:int99"], "unknown type 'int99'"),
        (["topics", "create", "u", "--partitions", "1", "--schema", "_offset:int64"], "'_offset' is reserved"),
        (["topics", "create", "u", "--partitions", "1", "--config", "retention.hours=1"], "retention.hours"),
        (["topics", "create", "u", "--partitions", "1", "--schema-file", str(tmp_path / "none.json")],
         "cannot read schema file"),
    ]
    for args, expected in cases:
        line = error_line(run(backend, *args, expect=2))
        assert expected in line, (args, line)
    broker = backend.connect()
    assert broker.list_topics() == ["t"]  # nothing half-written
    assert broker.describe_topic("t").schema.equals(pa.schema(
        [("key", pa.binary()), ("value", pa.binary()), ("headers", pa.map_(pa.string(), pa.binary()))]))


def test_topics_alter_round_trip(backend, tmp_path):
    """A topic changed as a user changes it: a column added with a default, a rename by id
    (text spec and an edited describe --json), more partitions, configs; versions listed."""
    run(backend, "topics", "create", "orders", "--partitions", "2", "--schema", "id:int32 not null,name:string")
    broker = backend.connect()
    producer = broker.producer()
    producer.send("orders", [{"id": 1, "name": "a"}])
    producer.flush()
    human = run(backend, "topics", "alter", "orders", "--schema",
                'id:int64 not null,name:string,currency:string not null default "EUR"', "--by", "ci").out
    assert human.splitlines() == ["Altered topic orders:",
                                  "  schema version 1 -> 2: changed id from int32 to int64; "
                                  "added currency string not null (id 7)"]
    # rename name -> customer by its id, and grow partitions and change configs in the same alteration
    done = run_json(backend, "topics", "alter", "orders", "--schema",
                    'id:int64 not null,customer:string id 6,currency:string not null default "EUR"',
                    "--partitions", "3", "--config", "retention.ms=60000", "schema.compatibility=full")
    assert done == {"topic": "orders", "changed": True, "schema_version": 3, "partition_count": 3, "changes": {
        "schema": {"from": 2, "to": 3, "changes": ["renamed name to customer (id 6)"]},
        "partitions": {"from": 2, "to": 3},
        "config": {"retention.ms": {"from": -1, "to": 60000},
                   "schema.compatibility": {"from": "BACKWARD", "to": "FULL"}}}}
    described = run_json(backend, "topics", "describe", "orders")
    assert described["schema"]["fields"] == [
        {"name": "id", "type": "int64", "nullable": False, "id": 5},
        {"name": "customer", "type": "string", "nullable": True, "id": 6},
        {"name": "currency", "type": "string", "nullable": False, "default": "EUR", "id": 7}]
    assert [(v["version"], [f["name"] for f in v["fields"]]) for v in described["schema_versions"]] == [
        (1, ["id", "name"]), (2, ["id", "name", "currency"]), (3, ["id", "customer", "currency"])]
    assert described["schema_versions"][1]["created_by"] == "ci"
    # describe --json, edited, is a --schema-file: rename customer -> buyer (same id), add a column
    schema = described["schema"]
    schema["fields"][1]["name"] = "buyer"
    schema["fields"].append({"name": "note", "type": "string"})
    (tmp_path / "s.json").write_text(json.dumps(schema))
    assert run_json(backend, "topics", "alter", "orders", "--schema-file", str(tmp_path / "s.json"))[
        "schema_version"] == 4
    assert run_json(backend, "topics", "alter", "orders", "--schema-file", str(tmp_path / "s.json")) == {
        "topic": "orders", "changed": False, "changes": {}, "schema_version": 4, "partition_count": 3}
    text = run(backend, "topics", "describe", "orders").out
    assert "Schema version  4" in " ".join(text.split("\n")) or "4" in text
    versions = text[text.index("VERSION"):].splitlines()
    assert versions[0].split()[:3] == ["VERSION", "CREATED", "BY"] and len(versions) >= 6
    rows = backend.connect().consumer()
    rows.subscribe(["orders"])
    assert rows.poll(timeout_s=1).select(["id", "buyer", "currency", "note"]).to_pylist() == [
        {"id": 1, "buyer": "a", "currency": "EUR", "note": None}]


def test_topics_alter_errors_change_nothing(backend):
    """Exit code 2 and one error line (the API's typed errors, every rule, are tested in
    tests/integration/test_topic_alteration.py and tests/unit/test_schema_rules.py)."""
    run(backend, "topics", "create", "t", "--partitions", "2", "--schema", "id:int64,name:string")
    cases = [
        (["--schema", "id:int99"], "unknown type 'int99'"),
        (["--schema", "id:int32,name:string"], "'id' changes type from int64 to int32"),
        (["--schema", "id:int64,name:string default [1"], "JSON literal"),
        (["--partitions", "1"], "partitions can only be added"),
        (["--config", "retention.hours=1"], "retention.hours"),
        ([], "needs --schema"),
    ]
    for args, expected in cases:
        line = error_line(run(backend, "topics", "alter", "t", *args, expect=2))
        assert expected in line, (args, line)
    assert error_line(run(backend, "topics", "alter", "nope", "--partitions", "3", expect=2)).startswith(
        "error: unknown topic")
    described = run_json(backend, "topics", "describe", "t")
    assert (described["schema_version"], len(described["partitions"])) == (1, 2)
    assert backend.connect().topic_alterations("t") == []


def _in_process(backend, *args: str) -> tuple[int, str, str]:
    """``txn-broker ARGS`` in this process (cheaper than the console script)."""
    import contextlib
    import io

    from txn_broker.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["--database-url", backend.database_url, "--storage-url", backend.storage_url, *args])
        except SystemExit as exit_:  # argparse's usage errors
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_topics_delete_records(backend, tmp_path):
    broker = backend.connect()
    broker.create_topic("dr", partitions=2)
    producer = broker.producer()
    for partition in (0, 1):
        for _ in range(2):
            producer.send("dr", [{"key": None, "value": b"v", "headers": None}] * 3, partition=partition)
            producer.flush()
    producer.close()
    code, out, _ = _in_process(backend, "topics", "delete-records", "dr", "--offset", "0=4")
    assert code == 0 and out.split() == ["TOPIC", "PARTITION", "LOW_WATERMARK", "dr", "0", "4"]
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0, "offset": 5},
                                                  {"topic": "dr", "partition": 1, "offset": -1}], "version": 1}))
    code, out, _ = _in_process(backend, "--json", "topics", "delete-records", "--offset-json-file", str(offsets))
    assert code == 0 and json.loads(out) == {"partitions": [
        {"topic": "dr", "partition": 0, "low_watermark": 5}, {"topic": "dr", "partition": 1, "low_watermark": 6}]}
    code, _, err = _in_process(backend, "topics", "delete-records", "dr", "--offset", "0=4", "1=7")
    assert code != 0 and "high watermark is 6" in err
    assert _in_process(backend, "topics", "delete-records", "dr")[0] == 2  # no --offset
    assert _in_process(backend, "topics", "delete-records", "dr", "--offset", "0=x")[0] == 2
    offsets.write_text("{}")
    assert _in_process(backend, "topics", "delete-records", "--offset-json-file", str(offsets))[0] == 2
    assert [p.log_start_offset for p in broker.describe_topic("dr").partitions] == [5, 6]

"""``txn-broker transactions ...`` through the console script, on both backends."""

from __future__ import annotations

import pyarrow as pa
import pytest
from _cli import error_line, run, run_json

from txn_broker.errors import ProducerFencedError

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("v", pa.int64())])
SUMMARY_KEYS = {"transactional_id", "state", "producer_id", "producer_epoch", "txn_id", "txn_start_ms", "age_ms",
                "timeout_ms", "hanging", "last_update_ms", "partition_count", "record_count", "size_bytes"}
ACTION_KEYS = {"transactional_id", "action", "producer_id", "producer_epoch", "txn_id"}


def test_transactions_commands(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    done = broker.producer(transactional_id="etl.done")
    done.init_transactions()
    with done.transaction():
        done.send("t", [{"v": 1}], partition=0)
        done.send("t", [{"v": 2}], partition=1)
    still_open = broker.producer(transactional_id="etl.open", transaction_timeout_ms=600_000)
    still_open.init_transactions()
    still_open.begin_transaction()
    still_open.send("t", [{"v": 3}], partition=1)
    still_open.flush()
    expired = broker.producer(transactional_id="etl.expired", transaction_timeout_ms=1)
    expired.init_transactions()
    expired.begin_transaction()
    expired.send("t", [{"v": 4}], partition=0)
    expired.flush()

    listed = run_json(backend, "transactions", "list")["transactions"]
    assert [t["transactional_id"] for t in listed] == ["etl.done", "etl.expired", "etl.open"]
    assert all(set(t) == SUMMARY_KEYS for t in listed)
    states = {t["transactional_id"]: (t["state"], t["hanging"], t["partition_count"]) for t in listed}
    assert states == {"etl.done": ("CompleteCommit", False, 2), "etl.expired": ("Ongoing", True, 1),
                      "etl.open": ("Ongoing", False, 1)}
    ongoing = run(backend, "transactions", "list", "--state", "Ongoing").out.splitlines()
    assert ongoing[0].split()[:3] == ["TRANSACTIONAL_ID", "STATE", "PRODUCER_ID"]
    assert [ln.split()[0] for ln in ongoing[1:]] == ["etl.expired", "etl.open"]
    assert ongoing[1].split()[1:3] == ["Ongoing", "(hanging)"]

    described = run_json(backend, "transactions", "describe", "etl.done")
    assert described["state"] == "CompleteCommit"
    assert [(h["from_state"], h["to_state"]) for h in described["history"]] == [
        ("Dead", "Empty"), ("Empty", "Ongoing"), ("Ongoing", "PrepareCommit"), ("PrepareCommit", "CompleteCommit")]
    assert {(p["topic"], p["partition"], p["marker"]) for p in described["partitions"]} == {
        ("t", 0, "COMMIT"), ("t", 1, "COMMIT")}
    timeline = run(backend, "transactions", "describe", "etl.done").out
    lines = timeline[timeline.index("Timeline:"):].splitlines()
    assert lines[1].split()[:2] == ["AT", "+ELAPSED"]
    assert [ln.split()[2:5] for ln in lines[2:]] == [["Dead", "->", "Empty"], ["Empty", "->", "Ongoing"],
                                                     ["Ongoing", "->", "PrepareCommit"],
                                                     ["PrepareCommit", "->", "CompleteCommit"]]
    assert "no transactional id 'nope'" in error_line(run(backend, "transactions", "describe", "nope", expect=2))

    hanging = run_json(backend, "transactions", "find-hanging")["hanging"]
    assert [h["transactional_id"] for h in hanging] == ["etl.expired"]
    assert hanging[0]["partitions"] == [{"topic": "t", "partition": 0, "first_offset": 1}]
    everything = run(backend, "transactions", "find-hanging", "--older-than-ms", "0").out.splitlines()
    assert sorted(ln.split()[0] for ln in everything[1:]) == ["etl.expired", "etl.open"]

    aborted = run_json(backend, "transactions", "abort", "etl.open")
    assert set(aborted) == ACTION_KEYS and aborted["action"] == "aborted" and aborted["producer_epoch"] == 1
    with pytest.raises(ProducerFencedError):
        still_open.commit_transaction()
    again = run(backend, "transactions", "abort", "etl.open", expect=1)
    assert "has no open transaction" in error_line(again)

    swept = run_json(backend, "transactions", "abort-expired")
    assert [a["transactional_id"] for a in swept["aborted"]] == ["etl.expired"] and swept["completed"] == []
    assert broker.describe_transaction("etl.expired").state == "CompleteAbort"
    assert run(backend, "transactions", "abort-expired").out.strip().startswith(
        "No expired or decided-but-unfinished transactions in database ")
    # nothing is idle for transactional_id_expiration_ms (7 days) yet
    assert run_json(backend, "transactions", "expire-ids") == {"expired": [], "producer_states_removed": 0}
    assert {t.transactional_id for t in broker.list_transactions()} == {"etl.done", "etl.expired", "etl.open"}

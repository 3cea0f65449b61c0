"""``txn-broker metrics``: the exporter's figures equal what the describe commands report
(topics describe, groups describe, transactions list and find-hanging, gc --dry-run),
through committed, aborted and open transactions, on both backends; label values are
escaped and carry no URL or credential. The first scrape runs the console script; the
other commands run in-process (the same ``main``), which keeps the test fast."""

from __future__ import annotations

import contextlib
import io
import json
import time
import urllib.request

import pyarrow as pa
from _cli import run
from prometheus_client.parser import text_string_to_metric_families

from txn_broker import TopicPartition

SCHEMA = pa.schema([("id", pa.int64()), ("body", pa.string())])
#: a group id needing escapes in the text format (quotes and a backslash)
ODD_GROUP = 'team "a"\\b'


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "body": [f"r{i}" for i in range(start, start + n)]},
                    schema=SCHEMA)


def cli(backend, *args: str) -> str:
    """``txn-broker ARGS`` run in this process; its stdout (exit code 0 asserted)."""
    from txn_broker.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--database-url", backend.database_url, "--storage-url", backend.storage_url, *args])
    assert code == 0, err.getvalue()
    return out.getvalue()


def run_json(backend, *args: str):
    return json.loads(cli(backend, "--json", *args))


def scrape(backend, *, subprocess: bool = False) -> tuple[str, dict[str, dict[tuple[tuple[str, str], ...], float]]]:
    text = run(backend, "metrics").out if subprocess else cli(backend, "metrics")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return text, samples


#: figures that follow the clock, and the exporter's own
TIMED = ("txn_broker_oldest_open_transaction_seconds", "txn_broker_consumer_group_lag_seconds",
         "txn_broker_gc_oldest_queued_object_seconds")


def figures_only(samples):
    return {name: v for name, v in samples.items()
            if name not in TIMED and not name.startswith(("txn_broker_scrape_", "txn_broker_exporter_"))}


def served_figures(broker):
    """The figures a refreshing exporter (``--refresh-interval``) answers over HTTP."""
    from prometheus_client import CollectorRegistry

    from txn_broker.metrics import RefreshingExporter, start_refreshed_server

    exporter = RefreshingExporter(broker.metrics_figures, 3600, CollectorRegistry(auto_describe=False))
    server, _thread = start_refreshed_server(exporter, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as answer:
            text = answer.read().decode()
    finally:
        exporter.stop()
        server.shutdown()
        server.server_close()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return figures_only(samples)


def test_the_refresh_interval_is_checked():
    """A usage error, before anything connects; its default is the exporter's."""
    from txn_broker.cli import metrics as cli_metrics
    from txn_broker.cli.main import main
    from txn_broker.metrics import DEFAULT_REFRESH_INTERVAL_S

    assert cli_metrics.DEFAULT_REFRESH_INTERVAL_S == DEFAULT_REFRESH_INTERVAL_S

    for bad in ("-1", "soon", "100000"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["metrics", "--listen", "127.0.0.1:0", "--refresh-interval", bad])
            except SystemExit as exit_:
                assert exit_.code == 2
            else:
                raise AssertionError(f"--refresh-interval {bad} was accepted")
        assert "--refresh-interval" in err.getvalue(), err.getvalue()


def value(samples, name: str, **labels: object) -> float:
    return samples[name][tuple(sorted((k, str(v)) for k, v in labels.items()))]


def test_exporter_figures_equal_the_describe_commands(backend):
    broker = backend.connect()
    broker.create_topic("orders", partitions=3, schema=SCHEMA)
    broker.create_topic("events", partitions=1, schema=SCHEMA)
    committer = broker.producer(transactional_id="committer")
    committer.init_transactions()
    for batch in range(2):
        with committer.transaction():
            committer.send("orders", rows(5, batch * 5), partition=0)
            committer.send("orders", rows(3, batch * 5), partition=1)
            committer.send("events", rows(2, batch * 5), partition=0)
    aborter = broker.producer(transactional_id="aborter")
    aborter.init_transactions()
    aborter.begin_transaction()
    aborter.send("orders", rows(4), partition=0)
    aborter.flush()
    aborter.abort_transaction()
    with committer.transaction():  # committed after the aborted records: lag spans them
        committer.send("orders", rows(2, 100), partition=0)
    # open past its timeout, nothing sweeps it: hangs, holding orders-1 and orders-2 back
    stuck = broker.producer(transactional_id="stuck", transaction_timeout_ms=300)
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.send("orders", rows(1, 200), partition=1)
    stuck.send("orders", rows(1, 201), partition=2)
    stuck.flush()
    with committer.transaction():  # committed behind the open one on orders-1: above the LSO
        committer.send("orders", rows(2, 300), partition=1)
    broker.commit_offsets("g1", {TopicPartition("orders", 0): 3, TopicPartition("orders", 1): 6,
                                 TopicPartition("events", 0): 4})
    broker.commit_offsets(ODD_GROUP, {TopicPartition("orders", 0): 11})  # inside the aborted records
    produced_ms = broker.now_ms()
    time.sleep(0.4)

    before_ms = broker.now_ms()
    text, samples = scrape(backend, subprocess=True)
    after_ms = broker.now_ms()
    # a served exporter refreshing in the background serves the same figures
    assert served_figures(broker) == figures_only(samples)

    for topic in ("orders", "events"):
        described = run_json(backend, "topics", "describe", topic)
        for p in described["partitions"]:
            labels = {"topic": topic, "partition": p["partition"]}
            assert value(samples, "txn_broker_partition_high_watermark", **labels) == p["high_watermark"]
            assert value(samples, "txn_broker_partition_last_stable_offset", **labels) == p["last_stable_offset"]
            assert value(samples, "txn_broker_partition_log_start_offset", **labels) == p["log_start_offset"]
            assert value(samples, "txn_broker_partition_segments", **labels) == p["segments"]
            assert value(samples, "txn_broker_partition_size_bytes", **labels) == p["size_bytes"]
    # the open transaction holds orders-1 back below its high watermark
    assert (value(samples, "txn_broker_partition_last_stable_offset", topic="orders", partition=1)
            < value(samples, "txn_broker_partition_high_watermark", topic="orders", partition=1))

    for group in ("g1", ODD_GROUP):
        described = run_json(backend, "groups", "describe", group)
        for p in described["partitions"]:
            labels = {"group": group, "topic": p["topic"], "partition": p["partition"]}
            assert value(samples, "txn_broker_consumer_group_offset", **labels) == p["committed_offset"]
            assert value(samples, "txn_broker_consumer_group_lag", **labels) == p["lag"]
            lag_s = value(samples, "txn_broker_consumer_group_lag_seconds", **labels)
            if p["lag"] == 0:
                assert lag_s == 0
            else:  # the oldest unconsumed committed record was written before produced_ms
                assert 0.3 < lag_s < (broker.now_ms() - produced_ms) / 1000 + 30, (labels, lag_s)
    # orders-0: 10 committed, 4 aborted, 2 committed records: lag counts offsets, as groups describe
    assert value(samples, "txn_broker_consumer_group_lag", group="g1", topic="orders", partition=0) == 13
    assert value(samples, "txn_broker_consumer_group_lag", group=ODD_GROUP, topic="orders", partition=0) == 5
    assert value(samples, "txn_broker_consumer_group_lag_seconds", group="g1", topic="orders", partition=1) == 0

    listed = run_json(backend, "transactions", "list")["transactions"]
    for state in ("Empty", "Ongoing", "CompleteCommit", "CompleteAbort", "PrepareCommit"):
        assert value(samples, "txn_broker_transactions", state=state) == sum(t["state"] == state for t in listed)
    assert value(samples, "txn_broker_transactions", state="Ongoing") == 1
    hanging = run_json(backend, "transactions", "find-hanging")["hanging"]
    assert [h["transactional_id"] for h in hanging] == ["stuck"]
    assert value(samples, "txn_broker_transactions_hanging") == sum(t["hanging"] for t in listed) == 1
    oldest = value(samples, "txn_broker_oldest_open_transaction_seconds")
    start_ms = hanging[0]["start_ms"]
    assert (before_ms - start_ms) / 1000 - 1 <= oldest <= (after_ms - start_ms) / 1000 + 1
    assert value(samples, "txn_broker_transactions_committed_total") == 4
    assert value(samples, "txn_broker_transactions_aborted_total") == 1

    dry = run_json(backend, "gc", "--dry-run")
    assert value(samples, "txn_broker_gc_aborted_segments") == dry["aborted_segments"] == 1
    assert value(samples, "txn_broker_gc_aborted_bytes") == dry["aborted_bytes"] > 0
    assert value(samples, "txn_broker_gc_queued_objects", state="waiting") == 0
    assert value(samples, "txn_broker_scrape_success") == 1

    # labels are escaped by the text format, and none carries the database's URL or password
    assert 'group="team \\"a\\"\\\\b"' in text
    assert backend.database_url not in text and "password" not in text.lower() and "://" not in text

    # the admin abort and gc move the figures: no open transaction, the abort's segments queued
    cli(backend, "transactions", "abort", "stuck")
    cli(backend, "gc")
    _text, after = scrape(backend)
    assert value(after, "txn_broker_transactions_hanging") == 0
    assert value(after, "txn_broker_oldest_open_transaction_seconds") == 0
    assert value(after, "txn_broker_transactions_aborted_total") == 2
    assert (value(after, "txn_broker_partition_last_stable_offset", topic="orders", partition=1)
            == value(after, "txn_broker_partition_high_watermark", topic="orders", partition=1))
    assert value(after, "txn_broker_gc_aborted_segments") == 0
    assert value(after, "txn_broker_gc_queued_objects", state="waiting") == 3  # 1 + the 2 of "stuck"
    assert value(after, "txn_broker_gc_oldest_queued_object_seconds") >= 0
    broker.close()

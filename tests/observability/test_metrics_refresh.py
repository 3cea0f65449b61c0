"""The exporter's background refresh (``--refresh-interval``, txn_broker/metrics/refresh.py):
the first scrape already holds the figures, a scrape answers with the last refresh, a change
shows after the next one (called, or by the refresh thread), the live registry stays live,
and a refresh that fails keeps the last figures served, counted and logged without
credentials. On both backends, over HTTP as Prometheus scrapes."""

from __future__ import annotations

import gzip
import logging
import time
import urllib.request

import pyarrow as pa
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from txn_broker.metrics import RefreshingExporter, start_refreshed_server

HW = "txn_broker_partition_high_watermark"


def rows(n: int) -> pa.Table:
    return pa.table({"key": [b"k"] * n, "value": [b"v"] * n,
                     "headers": pa.array([[]] * n, pa.map_(pa.string(), pa.binary()))})


def scrape(url: str, gzipped: bool = False) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzipped else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        body = answer.read()
        assert (answer.headers.get("Content-Encoding") == "gzip") == gzipped
    text = (gzip.decompress(body) if gzipped else body).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def hw(samples, topic: str, partition: int) -> float | None:
    return samples.get((HW, (("partition", str(partition)), ("topic", topic))))


def served(exporter: RefreshingExporter) -> tuple[str, object]:
    server, _thread = start_refreshed_server(exporter, "127.0.0.1", 0)
    return f"http://127.0.0.1:{server.server_port}/metrics", server


def test_scrapes_answer_with_the_last_refresh_and_the_live_registry(backend):
    broker = backend.connect()
    broker.create_topic("orders", 2)
    live = CollectorRegistry(auto_describe=False)
    requests = Counter("listener_requests", "live at scrape time", registry=live)
    exporter = RefreshingExporter(broker.metrics_figures, 3600, live)  # the thread never refreshes
    url, server = served(exporter)
    try:
        # the first refresh ran before the port answered: the first scrape holds the figures
        assert exporter.refreshes == 1
        first = scrape(url)
        assert hw(first, "orders", 0) == 0 and hw(first, "orders", 1) == 0
        assert first[("txn_broker_scrape_success", ())] == 1
        assert first[("txn_broker_exporter_refresh_interval_seconds", ())] == 3600
        assert 0 < first[("txn_broker_exporter_refresh_duration_seconds", ())] < 60
        assert abs(first[("txn_broker_exporter_last_refresh_timestamp_seconds", ())] - time.time()) < 60

        producer = broker.producer(transactional_id="refresh")
        producer.init_transactions()
        with producer.transaction():
            producer.send("orders", rows(3), partition=0)
        requests.inc(2)
        # served from the last refresh: not there yet; the live registry is
        stale = scrape(url, gzipped=True)
        assert hw(stale, "orders", 0) == 0
        assert stale[("listener_requests_total", ())] == 2
        assert stale[("txn_broker_exporter_last_refresh_timestamp_seconds", ())] == \
            first[("txn_broker_exporter_last_refresh_timestamp_seconds", ())]

        assert exporter.refresh()
        fresh = scrape(url, gzipped=True)
        assert hw(fresh, "orders", 0) == 3 and hw(fresh, "orders", 1) == 0
        assert fresh[("txn_broker_transactions_committed_total", ())] == 1
        assert fresh[("txn_broker_exporter_last_refresh_timestamp_seconds", ())] > \
            first[("txn_broker_exporter_last_refresh_timestamp_seconds", ())]
        assert scrape(url) == fresh  # the plain and the gzipped answers agree

        # the refresh thread: a change shows without anyone calling refresh()
        background = RefreshingExporter(broker.metrics_figures, 0.2, CollectorRegistry(auto_describe=False))
        url2, server2 = served(background)
        try:
            with producer.transaction():
                producer.send("orders", rows(2), partition=1)
            deadline = time.monotonic() + 30
            while hw(scrape(url2), "orders", 1) != 2:
                assert time.monotonic() < deadline, "the refresh thread never showed the new records"
                time.sleep(0.1)
            assert background.refreshes >= 2
        finally:
            background.stop()
            server2.shutdown()
            server2.server_close()
        producer.close()
    finally:
        exporter.stop()
        server.shutdown()
        server.server_close()
        broker.close()


def test_a_failing_refresh_keeps_the_last_figures_served_and_is_counted(backend, caplog):
    broker = backend.connect()
    broker.create_topic("orders", 1)
    exporter = RefreshingExporter(broker.metrics_figures, 3600, CollectorRegistry(auto_describe=False))
    url, server = served(exporter)
    engine = sa.create_engine(backend.database_url)
    try:
        before = scrape(url)
        assert hw(before, "orders", 0) == 0 and before[("txn_broker_exporter_refresh_failures_total", ())] == 0
        with engine.begin() as conn:  # the figures' queries cannot run: a real database error
            conn.execute(sa.text("ALTER TABLE group_offsets RENAME TO group_offsets_away"))
        with caplog.at_level(logging.WARNING, logger="txn_broker.metrics.refresh"):
            assert not exporter.refresh()
            assert not exporter.refresh()
        failed = scrape(url)
        assert hw(failed, "orders", 0) == 0  # the last refresh's figures, still served
        assert failed[("txn_broker_exporter_refresh_failures_total", ())] == 2
        assert failed[("txn_broker_scrape_success", ())] == 0
        assert failed[("txn_broker_exporter_last_refresh_timestamp_seconds", ())] == \
            before[("txn_broker_exporter_last_refresh_timestamp_seconds", ())]
        logged = [r.getMessage() for r in caplog.records if "refreshing the broker's figures failed" in r.getMessage()]
        assert len(logged) == 2
        # an exporter whose first refresh fails answers all the same: no figures, its own metrics
        blind = RefreshingExporter(broker.metrics_figures, 3600, CollectorRegistry(auto_describe=False))
        url2, server2 = served(blind)
        try:
            first = scrape(url2, gzipped=True)
            assert not [key for key in first if key[0] == HW]
            assert first[("txn_broker_scrape_success", ())] == 0
            assert first[("txn_broker_exporter_refresh_failures_total", ())] == 1
            assert ("txn_broker_exporter_last_refresh_timestamp_seconds", ()) not in first
        finally:
            blind.stop()
            server2.shutdown()
            server2.server_close()
        password = sa.make_url(backend.database_url).password
        assert not password or all(f":{password}@" not in line for line in logged)  # masked: ":***@"

        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE group_offsets_away RENAME TO group_offsets"))
        assert exporter.refresh()
        recovered = scrape(url)
        assert recovered[("txn_broker_scrape_success", ())] == 1
        assert recovered[("txn_broker_exporter_refresh_failures_total", ())] == 2
        assert recovered[("txn_broker_exporter_last_refresh_timestamp_seconds", ())] > \
            before[("txn_broker_exporter_last_refresh_timestamp_seconds", ())]
    finally:
        engine.dispose()
        exporter.stop()
        server.shutdown()
        server.server_close()
        broker.close()

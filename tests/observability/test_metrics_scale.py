"""The exporter's cost, cheaply: a scrape runs the same few statements however many
partitions, groups and transactions the broker has (set-based queries, never one per
partition or group), and the fast rendering of the per-partition and per-group families
gives exactly prometheus_client's text. The timing at 10,000 partitions and 1,000 groups
is bench case 12 (``make bench``)."""

from __future__ import annotations

import gzip
import urllib.request

import sqlalchemy as sa
from prometheus_client import generate_latest

from txn_broker import TopicPartition
from txn_broker.database import Tx
from txn_broker.metrics import BrokerCollector, broker_registry, start_metrics_server
from txn_broker.metrics.figures import BrokerFigures, GcBacklog, GroupPartitionFigures, PartitionFigures


def _statements(broker, call) -> list[str]:
    """The statements ``call`` runs: through SQLAlchemy, and the named queries run on the
    driver's own cursor (``Tx._native``), which SQLAlchemy's events do not see."""
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_rest) -> None:
        seen.append(statement)

    native = Tx._native

    def record_native(tx, query, params):
        seen.append(query)
        return native(tx, query, params)

    sa.event.listen(broker._db.engine, "before_cursor_execute", record)
    Tx._native = record_native
    try:
        call()
    finally:
        Tx._native = native
        sa.event.remove(broker._db.engine, "before_cursor_execute", record)
    return seen


def test_a_scrape_runs_the_same_statements_whatever_the_partitions_and_groups(backend):
    broker = backend.connect()
    broker.create_topic("small", 2)
    registry = broker_registry(broker)
    generate_latest(registry)  # the first scrape counts the transaction history once
    small = _statements(broker, lambda: generate_latest(registry))

    for t in range(3):
        broker.create_topic(f"big-{t}", 20)
    producer = broker.producer(transactional_id="scale")
    producer.init_transactions()
    for t in range(3):
        with producer.transaction():
            producer.send(f"big-{t}", [{"key": b"k", "value": b"v"}] * 3, partition=t)
    producer.begin_transaction()  # left open
    producer.send("big-0", [{"key": b"k", "value": b"open"}], partition=5)
    producer.flush()
    for g in range(15):
        with broker.consumer(group_id=f"group-{g}") as consumer:
            consumer.commit({TopicPartition(f"big-{g % 3}", p): 0 for p in range(g, g + 3)})
    figures = broker.metrics_figures()
    assert len(figures.partitions) == 62 and len({g.group for g in figures.groups}) == 15
    assert figures.transactional_ids["Ongoing"] == 1
    big = _statements(broker, lambda: generate_latest(registry))
    # the same few statements (the clock is read at most once a scrape), not one per
    # partition or group: 62 partitions and 15 groups, and at most 10 statements
    assert set(big) <= set(small) and len(big) <= 10, (big, small)
    assert {"metrics_partitions", "metrics_group_offsets"} <= set(big)
    producer.abort_transaction()
    producer.close()
    broker.close()


def _figures() -> BrokerFigures:
    odd = ['team "a"\\b', "line\nbreak", "ünï-cödé", "plain"]
    partitions = [PartitionFigures(f"t{i % 3}", i, i, 10**i, 10**i - 1, i * 7, 2**40 + i) for i in range(12)]
    groups = [GroupPartitionFigures(odd[i % 4], f"t{i % 3}", i, i * 1000, 10**i, 10**i - i * 1000, i * 0.37)
              for i in range(12)]
    return BrokerFigures(now_ms=1, partitions=partitions, groups=groups,
                         transactional_ids={"Empty": 1, "Ongoing": 2}, hanging_transactions=1,
                         oldest_open_transaction_seconds=12.5, committed_transactions=3, aborted_transactions=4,
                         gc=GcBacklog(1, 2, 3, 4, 5.0))


def test_the_served_text_is_prometheus_clients_with_label_values_escaped():
    registry = broker_registry_of(_figures())
    text = generate_latest(registry)
    assert b'group="team \\"a\\"\\\\b"' in text and b'group="line\\nbreak"' in text
    assert registry.get_sample_value("txn_broker_partition_high_watermark", {"topic": "t2", "partition": "11"}) \
        == 10**11
    server, _thread = start_metrics_server(registry, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert _timeless(answer.read()) == _timeless(text)
        asked = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(asked, timeout=10) as answer:
            assert answer.headers["Content-Encoding"] == "gzip"
            assert _timeless(gzip.decompress(answer.read())) == _timeless(text)
    finally:
        server.shutdown()
        server.server_close()


def _timeless(text: bytes) -> list[bytes]:
    return [line for line in text.splitlines() if not line.startswith(b"txn_broker_scrape_duration_seconds ")]


def broker_registry_of(figures: BrokerFigures):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(lambda: figures))
    return registry

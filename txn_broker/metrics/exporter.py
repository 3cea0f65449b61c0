"""The Prometheus exporter: the metric families of the broker-wide figures
(:mod:`.figures`), a ``prometheus_client`` collector that reads them at every scrape, and
prometheus_client's HTTP server that serves it (``txn-broker metrics --listen`` and
``txn-broker serve --metrics-listen`` with ``--refresh-interval 0``; by default they refresh
in the background instead, :mod:`.refresh`).

Label values are topic names, partition numbers, group ids and state names; the text
format and its escaping are prometheus_client's. No label or help text carries a URL or a
credential.

The Iceberg publish lag (``txn_broker_iceberg_publish_lag_seconds{topic}``, catalog
source "planned") belongs in :meth:`BrokerCollector.collect`, after the gc figures, once
Iceberg topics record what they published."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..errors import TxnBrokerError
from .catalog import spec
from .figures import BrokerFigures
from .text import BulkGauge, LabelRows

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)


def _gauge(name: str) -> GaugeMetricFamily:
    item = spec(name)
    return GaugeMetricFamily(name, item.help, labels=list(item.labels))


def _counter(name: str, value: float) -> CounterMetricFamily:
    item = spec(name)
    return CounterMetricFamily(name.removesuffix("_total"), item.help, value=value)


def _bulk(name: str, labels: LabelRows, values: list[float]) -> BulkGauge:
    return BulkGauge(name, spec(name).help, labels, values)


def figure_metrics(figures: BrokerFigures) -> list[Metric]:
    """The metric families of one snapshot of figures. The per-partition and per-group
    families are columns (:class:`.text.BulkGauge`): a scrape of 10,000s of partitions
    builds no object per sample."""
    parts = figures.partitions
    by_partition = LabelRows(["topic", "partition"], [(p.topic, str(p.partition)) for p in parts])
    hw = _bulk("txn_broker_partition_high_watermark", by_partition, [p.high_watermark for p in parts])
    lso = _bulk("txn_broker_partition_last_stable_offset", by_partition, [p.last_stable_offset for p in parts])
    start = _bulk("txn_broker_partition_log_start_offset", by_partition, [p.log_start_offset for p in parts])
    segments = _bulk("txn_broker_partition_segments", by_partition, [p.segment_count for p in parts])
    size = _bulk("txn_broker_partition_size_bytes", by_partition, [p.size_bytes for p in parts])
    groups = figures.groups
    by_group = LabelRows(["group", "topic", "partition"], [(g.group, g.topic, str(g.partition)) for g in groups])
    offset = _bulk("txn_broker_consumer_group_offset", by_group, [g.committed_offset for g in groups])
    lag = _bulk("txn_broker_consumer_group_lag", by_group, [g.lag for g in groups])
    lag_s = _bulk("txn_broker_consumer_group_lag_seconds", by_group, [g.lag_seconds for g in groups])
    states = _gauge("txn_broker_transactions")
    for state, count in figures.transactional_ids.items():
        states.add_metric([state], count)
    hanging, oldest = _gauge("txn_broker_transactions_hanging"), _gauge("txn_broker_oldest_open_transaction_seconds")
    hanging.add_metric([], figures.hanging_transactions)
    oldest.add_metric([], figures.oldest_open_transaction_seconds)
    gc_segments, gc_bytes = _gauge("txn_broker_gc_aborted_segments"), _gauge("txn_broker_gc_aborted_bytes")
    gc_segments.add_metric([], figures.gc.aborted_segments)
    gc_bytes.add_metric([], figures.gc.aborted_bytes)
    queued, queued_age = _gauge("txn_broker_gc_queued_objects"), _gauge("txn_broker_gc_oldest_queued_object_seconds")
    queued.add_metric(["due"], figures.gc.due_objects)
    queued.add_metric(["waiting"], figures.gc.waiting_objects)
    queued_age.add_metric([], figures.gc.oldest_queued_seconds)
    return [hw, lso, start, segments, size, offset, lag, lag_s, states, hanging, oldest,
            _counter("txn_broker_transactions_committed_total", figures.committed_transactions),
            _counter("txn_broker_transactions_aborted_total", figures.aborted_transactions),
            gc_segments, gc_bytes, queued, queued_age]


class BrokerCollector(Collector):
    """Reads the broker's figures at each scrape (one database snapshot) and yields them.
    A database that cannot be read yields ``txn_broker_scrape_success 0`` and nothing
    else (the error is logged), so the scrape itself still answers."""

    def __init__(self, read: Callable[[], BrokerFigures]) -> None:
        self._read = read

    @classmethod
    def of(cls, broker: Broker) -> BrokerCollector:
        return cls(broker.metrics_figures)

    def describe(self) -> list[Metric]:
        return []  # figures are read at scrape time only, never at registration

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        success = _gauge("txn_broker_scrape_success")
        try:
            figures = self._read()
        except TxnBrokerError as error:
            log.warning("metrics: reading the broker's figures failed: %s", error)
            success.add_metric([], 0)
            yield success
            return
        yield from figure_metrics(figures)
        success.add_metric([], 1)
        yield success
        duration = _gauge("txn_broker_scrape_duration_seconds")
        duration.add_metric([], time.perf_counter() - started)
        yield duration


def broker_registry(broker: Broker) -> CollectorRegistry:
    """A registry holding the broker's collector (and nothing else)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector.of(broker))
    return registry


def start_metrics_server(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, Any]:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread
    (prometheus_client's own server: the text format, gzipped when the scraper accepts
    it); returns (server, thread). Port 0 picks a free one: ``server.server_port``."""
    return start_http_server(port, host, registry)

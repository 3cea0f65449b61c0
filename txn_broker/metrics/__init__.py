"""Observability (docs/observability.md): the Prometheus exporter of the broker's figures,
the Kafka listener's metrics and the clients' metrics. Every metric is listed in
:mod:`.catalog`."""

from __future__ import annotations

from .catalog import BROKER_METRICS, LISTENER_METRICS, MetricSpec
from .client import CLIENT_METRICS, ClientMetrics, PrometheusClientMetrics, client_metrics
from .exporter import BrokerCollector, broker_registry, figure_metrics, start_metrics_server
from .figures import BrokerFigures, GcBacklog, GroupPartitionFigures, PartitionFigures, read_figures
from .listener import ListenerMetrics
from .refresh import DEFAULT_REFRESH_INTERVAL_S, RefreshingExporter, start_refreshed_server

__all__ = [
    "BROKER_METRICS", "LISTENER_METRICS", "MetricSpec", "BrokerCollector", "broker_registry",
    "figure_metrics", "start_metrics_server", "BrokerFigures", "GcBacklog", "GroupPartitionFigures",
    "PartitionFigures", "read_figures", "ListenerMetrics", "CLIENT_METRICS", "ClientMetrics",
    "PrometheusClientMetrics", "client_metrics", "DEFAULT_REFRESH_INTERVAL_S", "RefreshingExporter",
    "start_refreshed_server",
]

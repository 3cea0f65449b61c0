"""Producers' and consumers' own metrics: commit and abort latency, records and bytes sent
and polled, retries, errors by class.

Off unless asked for, and then free of cost when not asked: ``broker.producer(...,
metrics=registry)`` and ``broker.consumer(..., metrics=registry)`` take a
``prometheus_client.CollectorRegistry`` (the metrics below are registered in it once, and
shared by every client given the same registry) or any :class:`ClientMetrics` (the Airflow
plugins pass one that writes to Airflow's own Stats). Without ``metrics`` a client calls
nothing.

Records and bytes are counted when ``send()`` accepts them (the bytes of the Arrow data)
and when ``poll()`` returns them; retries are the coordinator calls a producer ran again
under the retry policy (txn_broker.retry); errors are the broker's typed errors a client
raised, by class name."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

#: commit and abort latency buckets (seconds)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: (name, kind, labels, help) of every client metric, as registered in a registry
CLIENT_METRICS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("txn_broker_client_records_sent_total", "counter", ("topic",), "Records a producer's send() accepted."),
    ("txn_broker_client_bytes_sent_total", "counter", ("topic",), "Bytes (Arrow) of those records."),
    ("txn_broker_client_records_polled_total", "counter", ("topic",), "Records a consumer's poll() returned."),
    ("txn_broker_client_bytes_polled_total", "counter", ("topic",), "Bytes (Arrow) of those records."),
    ("txn_broker_client_commit_duration_seconds", "histogram", (),
     "Time commit_transaction() took (flushing the transaction's last records included)."),
    ("txn_broker_client_abort_duration_seconds", "histogram", (), "Time abort_transaction() took."),
    ("txn_broker_client_retries_total", "counter", (), "Coordinator calls a producer ran again (retry policy)."),
    ("txn_broker_client_errors_total", "counter", ("error",),
     "Typed errors (txn_broker.errors) clients raised, by class name."),
)


class ClientMetrics:
    """Where a client reports. Every method does nothing here: subclass it and override
    what you record."""

    def sent(self, topic: str, records: int, size_bytes: int) -> None:
        """``send()`` accepted ``records`` records of ``size_bytes`` bytes for ``topic``."""

    def polled(self, topic: str, records: int, size_bytes: int) -> None:
        """``poll()`` returned ``records`` records of ``topic``."""

    def committed(self, seconds: float) -> None:
        """A transaction committed; ``commit_transaction()`` took ``seconds``."""

    def aborted(self, seconds: float) -> None:
        """A transaction aborted; ``abort_transaction()`` took ``seconds``."""

    def retried(self) -> None:
        """A call was run again under the retry policy."""

    def failed(self, error: BaseException) -> None:
        """The client raised ``error``."""


class PrometheusClientMetrics(ClientMetrics):
    """Client metrics in a prometheus_client registry (use :func:`client_metrics`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        made: dict[str, Any] = {}
        for name, kind, labels, help_text in CLIENT_METRICS:
            if kind == "counter":
                made[name] = Counter(name.removesuffix("_total"), help_text, list(labels), registry=registry)
            else:
                made[name] = Histogram(name, help_text, list(labels), registry=registry, buckets=LATENCY_BUCKETS)
        self._records_sent = made["txn_broker_client_records_sent_total"]
        self._bytes_sent = made["txn_broker_client_bytes_sent_total"]
        self._records_polled = made["txn_broker_client_records_polled_total"]
        self._bytes_polled = made["txn_broker_client_bytes_polled_total"]
        self._commit = made["txn_broker_client_commit_duration_seconds"]
        self._abort = made["txn_broker_client_abort_duration_seconds"]
        self._retries = made["txn_broker_client_retries_total"]
        self._errors = made["txn_broker_client_errors_total"]

    def sent(self, topic: str, records: int, size_bytes: int) -> None:
        self._records_sent.labels(topic).inc(records)
        self._bytes_sent.labels(topic).inc(size_bytes)

    def polled(self, topic: str, records: int, size_bytes: int) -> None:
        self._records_polled.labels(topic).inc(records)
        self._bytes_polled.labels(topic).inc(size_bytes)

    def committed(self, seconds: float) -> None:
        self._commit.observe(seconds)

    def aborted(self, seconds: float) -> None:
        self._abort.observe(seconds)

    def retried(self) -> None:
        self._retries.inc()

    def failed(self, error: BaseException) -> None:
        self._errors.labels(type(error).__name__).inc()


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, PrometheusClientMetrics] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def client_metrics(metrics: CollectorRegistry | ClientMetrics | None) -> ClientMetrics | None:
    """What a client reports to: None (nothing), a :class:`ClientMetrics` as it is, or the
    one :class:`PrometheusClientMetrics` of a registry. InvalidInputError otherwise."""
    if metrics is None or isinstance(metrics, ClientMetrics):
        return metrics
    if isinstance(metrics, CollectorRegistry):
        with _lock:
            found = _by_registry.get(metrics)
            if found is None:
                found = _by_registry[metrics] = PrometheusClientMetrics(metrics)
            return found
    from ..errors import InvalidInputError

    raise InvalidInputError(f"metrics must be a prometheus_client CollectorRegistry or a ClientMetrics, "
                            f"got {type(metrics).__name__}")

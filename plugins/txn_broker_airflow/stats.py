"""The broker clients' metrics inside Airflow: the operators' producers and consumers report
through Airflow's own Stats, so they reach StatsD, Datadog or OpenTelemetry as Airflow's
``[metrics]`` section configures (nothing when metrics are off). The names, under Airflow's
``statsd_prefix`` (``airflow.`` by default), are listed in docs/observability.md."""

from __future__ import annotations

from txn_broker.metrics import ClientMetrics


def _stats():  # type: ignore[no-untyped-def]
    from airflow.sdk.observability.stats import Stats

    return Stats


class AirflowStatsMetrics(ClientMetrics):
    """Client metrics as Airflow Stats: counters ``txn_broker.records_sent.<topic>``,
    ``txn_broker.bytes_sent.<topic>``, ``txn_broker.records_polled.<topic>``,
    ``txn_broker.bytes_polled.<topic>``, ``txn_broker.retries`` and
    ``txn_broker.errors.<ErrorClass>``; timers ``txn_broker.commit_duration`` and
    ``txn_broker.abort_duration`` (milliseconds). Topic counters carry a ``topic`` tag too,
    for backends with tags."""

    def sent(self, topic: str, records: int, size_bytes: int) -> None:
        stats = _stats()
        stats.incr(f"txn_broker.records_sent.{topic}", records, tags={"topic": topic})
        stats.incr(f"txn_broker.bytes_sent.{topic}", size_bytes, tags={"topic": topic})

    def polled(self, topic: str, records: int, size_bytes: int) -> None:
        stats = _stats()
        stats.incr(f"txn_broker.records_polled.{topic}", records, tags={"topic": topic})
        stats.incr(f"txn_broker.bytes_polled.{topic}", size_bytes, tags={"topic": topic})

    def committed(self, seconds: float) -> None:
        _stats().timing("txn_broker.commit_duration", seconds * 1000)

    def aborted(self, seconds: float) -> None:
        _stats().timing("txn_broker.abort_duration", seconds * 1000)

    def retried(self) -> None:
        _stats().incr("txn_broker.retries")

    def failed(self, error: BaseException) -> None:
        _stats().incr(f"txn_broker.errors.{type(error).__name__}")


#: the one instance the operators pass to their clients
AIRFLOW_CLIENT_METRICS = AirflowStatsMetrics()

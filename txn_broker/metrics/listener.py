"""The Kafka listener's own metrics (``txn-broker serve --metrics-listen``): requests,
errors and latency per API, open connections, refused authentications. The listener
calls :meth:`ListenerMetrics.observe` around each request and :meth:`ListenerMetrics.answered`
with each response before it is encoded; with no metrics configured it calls nothing.

The ``api`` label is Kafka's name of the request (``Produce``, ``Fetch``, ...); an API key
this table does not name is ``other``, so a client sending made-up keys cannot grow the
label set."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .catalog import spec

T = TypeVar("T")

#: Kafka's names of its API keys (the ones a listener may serve)
API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs",
    33: "AlterConfigs", 35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    42: "DeleteGroups", 44: "IncrementalAlterConfigs", 47: "OffsetDelete", 60: "DescribeCluster",
    61: "DescribeProducers", 65: "DescribeTransactions", 66: "ListTransactions",
}
SASL_AUTHENTICATE = 36
#: request latency buckets (seconds): a metadata answer in a millisecond to a long fetch wait
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, "other")


def has_error(payload: Any) -> bool:
    """Whether a response payload (the dicts and lists a handler returns) carries a
    non-zero ``error_code`` anywhere: at its top, or for a topic or partition."""
    stack = [payload]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            code = item.get("error_code")
            if code is not None and int(code) != 0:
                return True
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
    return False


class ListenerMetrics:
    """The listener's metrics, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def text(name: str) -> tuple[str, str]:
            return name.removesuffix("_total"), spec(name).help

        self.requests = Counter(*text("txn_broker_kafka_requests_total"), ["api"], registry=registry)
        self.errors = Counter(*text("txn_broker_kafka_request_errors_total"), ["api"], registry=registry)
        self.latency = Histogram(*text("txn_broker_kafka_request_duration_seconds"), ["api"], registry=registry,
                                 buckets=LATENCY_BUCKETS)
        self.connections = Gauge(*text("txn_broker_kafka_connections"), registry=registry)
        self.auth_failures = Counter(*text("txn_broker_kafka_authentication_failures_total"), registry=registry)

    def count_connections(self, count: Callable[[], int]) -> None:
        """Read the number of open connections from ``count`` at each scrape."""
        self.connections.set_function(lambda: float(count()))

    async def observe(self, api_key: int, pending: Awaitable[T]) -> T:
        """Await one request's handling, counting it, its time and, when it raises (the
        connection is then closed), an error."""
        name = api_name(api_key)
        started = time.perf_counter()
        try:
            return await pending
        except BaseException:
            self.errors.labels(name).inc()
            raise
        finally:
            self.latency.labels(name).observe(time.perf_counter() - started)
            self.requests.labels(name).inc()

    def answered(self, api_key: int, payload: Any) -> None:
        """A handler's response payload: counts an error code, and a refused SASL
        authentication."""
        if has_error(payload):
            self.errors.labels(api_name(api_key)).inc()
            if api_key == SASL_AUTHENTICATE:
                self.auth_failures.inc()

"""Every metric the broker exports: name, type, labels and meaning, in one table that the
exporter, the listener's metrics and docs/observability.md all follow (a test checks the
page lists each one). Names and labels are a public interface: dashboards and alert rules
depend on them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    name: str  # as exposed (counters with their _total)
    kind: str  # gauge, counter, histogram
    labels: tuple[str, ...]
    help: str
    #: where it is served: "exporter" (txn-broker metrics, and serve --metrics-listen),
    #: "listener" (serve --metrics-listen only), "refresh" (an exporter refreshing in the
    #: background, --refresh-interval above 0), "planned" (not served yet)
    source: str = "exporter"


P = ("topic", "partition")
G = ("group", "topic", "partition")

BROKER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("txn_broker_partition_high_watermark", "gauge", P,
               "The offset the next record appended to the partition will get."),
    MetricSpec("txn_broker_partition_last_stable_offset", "gauge", P,
               "The first offset of the partition's oldest open transaction (the high watermark when "
               "none is open): where read_committed readers stop."),
    MetricSpec("txn_broker_partition_log_start_offset", "gauge", P,
               "The first offset readers can read (moved by retention and delete-records)."),
    MetricSpec("txn_broker_partition_segments", "gauge", P,
               "Segments of the partition whose objects are stored (not purged by gc)."),
    MetricSpec("txn_broker_partition_size_bytes", "gauge", P,
               "Bytes of those segments."),
    MetricSpec("txn_broker_consumer_group_offset", "gauge", G,
               "The group's committed offset: the next offset it will read."),
    MetricSpec("txn_broker_consumer_group_lag", "gauge", G,
               "Records the group has still to read, up to the last stable offset (as groups describe)."),
    MetricSpec("txn_broker_consumer_group_lag_seconds", "gauge", G,
               "Age of the oldest committed record the group has not consumed, by the newest timestamp of "
               "the segment holding it (0 when the group is caught up)."),
    MetricSpec("txn_broker_transactions", "gauge", ("state",),
               "Transactional ids per coordinator state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
               "PrepareEpochFence, CompleteCommit, CompleteAbort)."),
    MetricSpec("txn_broker_transactions_hanging", "gauge", (),
               "Transactions Ongoing for longer than their own timeout (the ones the timeout sweep aborts)."),
    MetricSpec("txn_broker_oldest_open_transaction_seconds", "gauge", (),
               "How long the oldest open transaction has run (0 when none is open)."),
    MetricSpec("txn_broker_transactions_committed_total", "counter", (),
               "Transactions ever committed (counted in the database: every exporter agrees)."),
    MetricSpec("txn_broker_transactions_aborted_total", "counter", (),
               "Transactions ever aborted, by their producer, the timeout sweep or an admin."),
    MetricSpec("txn_broker_gc_aborted_segments", "gauge", (),
               "Segments of aborted transactions that gc has not purged yet."),
    MetricSpec("txn_broker_gc_aborted_bytes", "gauge", (),
               "Bytes of those segments."),
    MetricSpec("txn_broker_gc_queued_objects", "gauge", ("state",),
               "Objects queued for deletion (retention, aborted, deleted topics): state=\"due\" past the "
               "delete delay, gc deletes them on its next run; state=\"waiting\" still within it."),
    MetricSpec("txn_broker_gc_oldest_queued_object_seconds", "gauge", (),
               "How long the oldest queued object deletion has waited (0 when none is queued)."),
    MetricSpec("txn_broker_scrape_success", "gauge", (),
               "1 when the exporter read the figures above, 0 when the database could not be read "
               "(refreshing in the background: when its last refresh failed)."),
    MetricSpec("txn_broker_scrape_duration_seconds", "gauge", (),
               "How long reading the figures took."),
    MetricSpec("txn_broker_exporter_refresh_interval_seconds", "gauge", (),
               "Seconds between two refreshes of the figures (--refresh-interval).", source="refresh"),
    MetricSpec("txn_broker_exporter_refresh_duration_seconds", "gauge", (),
               "How long the last successful refresh took: reading the figures and rendering them.",
               source="refresh"),
    MetricSpec("txn_broker_exporter_last_refresh_timestamp_seconds", "gauge", (),
               "Unix time the last successful refresh completed: the figures served were read just before it "
               "(absent until a refresh succeeds).", source="refresh"),
    MetricSpec("txn_broker_exporter_refresh_failures_total", "counter", (),
               "Refreshes that failed (the figures of the last successful one stay served).", source="refresh"),
    MetricSpec("txn_broker_iceberg_publish_lag_seconds", "gauge", ("topic",),
               "Comes with Iceberg topics (iceberg.enabled): age of the oldest committed record not yet "
               "in the topic's Iceberg table.", source="planned"),
)

LISTENER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("txn_broker_kafka_requests_total", "counter", ("api",),
               "Kafka requests answered, per API (Produce, Fetch, ...).", "listener"),
    MetricSpec("txn_broker_kafka_request_errors_total", "counter", ("api",),
               "Requests whose response carries an error code, or that closed the connection.", "listener"),
    MetricSpec("txn_broker_kafka_request_duration_seconds", "histogram", ("api",),
               "Time from reading a request to having its response ready.", "listener"),
    MetricSpec("txn_broker_kafka_connections", "gauge", (),
               "Open client connections.", "listener"),
    MetricSpec("txn_broker_kafka_authentication_failures_total", "counter", (),
               "SASL authentications refused.", "listener"),
)


def spec(name: str) -> MetricSpec:
    for item in (*BROKER_METRICS, *LISTENER_METRICS):
        if item.name == name:
            return item
    raise KeyError(name)

"""`txn-broker serve --metrics-listen`: the listener's own metrics (requests, errors and
latency per API, open connections, refused authentications) next to the broker's figures,
counted while confluent-kafka creates a topic, produces and fails to authenticate."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from _kafka_listener import Listener
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_listener_metrics(backend, tmp_path):
    users = tmp_path / "users"
    users.write_text("alice:alice-secret\n")
    listener = Listener(backend.env, tmp_path / "serve.log", "--sasl-users", str(users),
                        "--metrics-listen", "127.0.0.1:0", "--refresh-interval", "0.5",
                        "--allow-everyone-if-no-acl-found")
    try:
        assert listener.proc.stdout is not None
        match = re.search(r"serving metrics at (http://\S+)", listener.proc.stdout.readline().decode())
        assert match, listener.log()
        url = match.group(1)
        sasl = {"bootstrap.servers": listener.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "alice"}
        admin = AdminClient({**sasl, "sasl.password": "alice-secret"})
        admin.create_topics([NewTopic("metered", 2)])["metered"].result(timeout=30)
        producer = Producer({**sasl, "sasl.password": "alice-secret", "enable.idempotence": True})
        for i in range(5):
            producer.produce("metered", value=f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        wrong = AdminClient({**sasl, "sasl.password": "wrong", "retries": 0})
        with pytest.raises(Exception):  # noqa: B017 - the client's own error type for a refused login
            wrong.list_topics(timeout=5)

        samples = scrape(url)
        assert samples[("txn_broker_kafka_requests_total", (("api", "Produce"),))] >= 1
        assert samples[("txn_broker_kafka_requests_total", (("api", "Metadata"),))] >= 1
        assert samples[("txn_broker_kafka_request_duration_seconds_count", (("api", "Produce"),))] >= 1
        assert samples[("txn_broker_kafka_authentication_failures_total", ())] >= 1
        assert samples[("txn_broker_kafka_request_errors_total", (("api", "SaslAuthenticate"),))] >= 1
        assert samples[("txn_broker_kafka_connections", ())] >= 1  # the producer's, still open
        # the broker's figures are served alongside, from the refresh every 0.5 s
        assert samples[("txn_broker_exporter_refresh_interval_seconds", ())] == 0.5
        deadline = time.monotonic() + 30
        while samples.get(("txn_broker_partition_high_watermark", (("partition", "0"), ("topic", "metered")))) != 3:
            assert time.monotonic() < deadline, "the refresh never showed the produced records"
            time.sleep(0.2)
            samples = scrape(url)
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        assert "alice-secret" not in text and "wrong" not in text
    finally:
        listener.stop()

"""The alerts fire for real: Debian's ``prometheus`` server on loopback scrapes
``txn-broker metrics --listen --refresh-interval 1`` with the repository's rules (their
``for:`` durations and ranges shortened in a test copy, so it takes seconds). A transaction left open past its
timeout, with nothing sweeping it, fires TxnBrokerHangingTransaction and
TxnBrokerLastStableOffsetStuck; aborting it resolves both."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from _servers import Backend, free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docker" / "prometheus" / "txn_broker_rules.yml"
WATCHED = {"TxnBrokerHangingTransaction", "TxnBrokerLastStableOffsetStuck"}


def short_rules(path: Path) -> None:
    """The rules with ``for:`` of 3 s and 10-minute ranges of 15 s."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "3s"
            rule["expr"] = rule["expr"].replace("[10m]", "[15s]")
    path.write_text(yaml.safe_dump(rules))


class Process:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def alerts(prometheus_url: str) -> dict[str, str]:
    """{alertname: state} of the alerts Prometheus holds (pending or firing)."""
    with urllib.request.urlopen(f"{prometheus_url}/api/v1/alerts", timeout=5) as response:
        body = json.load(response)
    return {a["labels"]["alertname"]: a["state"] for a in body["data"]["alerts"]}


def wait_until(check, timeout: float, what: str, last=lambda: None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass  # not up yet
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout}s; last: {last()}")


def test_hanging_transaction_and_stuck_lso_alerts_fire_and_resolve(tmp_path):
    # one backend is enough end to end: the figures are checked on both in tests/cli/test_cli_metrics.py
    backend = Backend("sqlite", f"sqlite:///{tmp_path}/broker.db", (tmp_path / "segments").as_uri())
    backend.env = {"TXN_BROKER_DATABASE_URL": backend.database_url, "TXN_BROKER_STORAGE_URL": backend.storage_url}
    prometheus = shutil.which("prometheus")
    assert prometheus, "Debian's prometheus package is missing: run scripts/system-deps.sh"
    broker = backend.connect()
    broker.create_topic("orders", partitions=2)
    stuck = broker.producer(transactional_id="stuck", transaction_timeout_ms=1000)
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.send("orders", pa.table({"key": [b"k"], "value": [b"v"],
                                   "headers": pa.array([[]], pa.map_(pa.string(), pa.binary()))}), partition=1)
    stuck.flush()  # written, never committed: holds orders-1's last stable offset; no sweep runs

    exporter = Process([sys.executable, "-m", "txn_broker.cli", "metrics", "--listen", "127.0.0.1:0",
                        "--refresh-interval", "1"],
                       tmp_path / "exporter.log", env={**os.environ, **backend.env})
    server = None
    try:
        assert exporter.proc.stdout is not None
        line = exporter.proc.stdout.readline().decode()
        match = re.search(r"serving metrics at (http://127\.0\.0\.1:(\d+))/metrics", line)
        assert match, (line, exporter.log_path.read_text())
        short_rules(tmp_path / "rules.yml")
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(tmp_path / "rules.yml")],
            "scrape_configs": [{"job_name": "txn-broker",
                                "static_configs": [{"targets": [f"127.0.0.1:{match.group(2)}"]}]}],
        }))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = Process([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                         tmp_path / "prometheus.log")
        wait_until(lambda: {name for name, state in alerts(url).items() if state == "firing"} >= WATCHED,
                   90, "both alerts firing", last=lambda: (alerts(url), server.log_path.read_text()[-2000:]))

        broker.abort_transaction("stuck")
        wait_until(lambda: not WATCHED & set(alerts(url)), 60, "both alerts resolved", last=lambda: alerts(url))
    finally:
        if server is not None:
            server.stop()
        exporter.stop()
        broker.close()

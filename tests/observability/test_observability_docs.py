"""docs/observability.md: its opening example runs as printed (in an empty directory, on the
embedded default) and it lists every metric the catalog names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from txn_broker.metrics import BROKER_METRICS, CLIENT_METRICS, LISTENER_METRICS

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_the_opening_example_runs(tmp_path):
    example = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXN_BROKER_")}
    result = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "txn_broker_consumer_group_lag{" in result.stdout


def test_every_metric_is_documented_with_its_labels():
    rows = {m[0]: m[1] for m in re.findall(r"^\| `(txn_broker_\w+)` \| \w+ \| ([^|]*?) ?\|", DOC.read_text(), re.M)}
    for spec in (*BROKER_METRICS, *LISTENER_METRICS):
        assert spec.name in rows, spec.name
        assert [label.strip() for label in rows[spec.name].split(",") if label.strip()] == list(spec.labels), spec.name


def test_every_client_metric_is_documented_with_its_labels():
    rows = {m[0]: m[1] for m in re.findall(r"^\| `(txn_broker_client_\w+)` \| \w+ \| ([^|]*?) ?\|", DOC.read_text(),
                                           re.M)}
    assert set(rows) == {name for name, *_ in CLIENT_METRICS}
    for name, _kind, labels, _help in CLIENT_METRICS:
        assert [label.strip() for label in rows[name].split(",") if label.strip()] == list(labels), name

"""docs/iceberg.md's opening example runs as printed, on the embedded default, in an
empty directory, and prints what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_opening_example_runs_as_printed(tmp_path: Path) -> None:
    text = (REPO / "docs" / "iceberg.md").read_text()
    block = re.search(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert block, "docs/iceberg.md has no Python example"
    script = tmp_path / "example.py"
    script.write_text(block.group(1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXN_BROKER_")}
    env.update(HOME=str(tmp_path), TXN_BROKER_HOME=str(tmp_path / ".txn_broker"), POLARS_ICEBERG_PLANNER="pyiceberg")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "txn_broker.transfers 2 {0: 1, 1: 1}"
    assert "'amount': -30" in lines[1] and "'amount': 30" in lines[1]
    assert "│ 0      │" in done.stdout  # the sum of the amounts

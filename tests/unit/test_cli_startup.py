"""The CLI starts without the libraries only some commands need: every `txn-broker` call
(and every test that runs one) would pay their import time."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("kio", "pandas", "pyspark", "pyiceberg", "airflow", "prometheus_client")


def test_the_cli_imports_no_heavy_library_until_a_command_needs_it():
    code = ("import sys, txn_broker, txn_broker.cli.main, txn_broker.kafka;"
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"

"""`txn-broker serve` in its own process, for tests with Kafka clients (tests/kafka, and the
Spark interop test in tests/spark)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Listener:
    """A running ``txn-broker serve --listen 127.0.0.1:0``."""

    def __init__(self, env: dict[str, str], log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txn_broker.cli", "serve", "--listen", "127.0.0.1:0", "--sweep-interval-ms", "500",
             *args],
            cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=self._log,
            start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"serve did not start: {line!r}\n{log_path.read_text()}")
        self.port = int(match.group(1))
        self.bootstrap = f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_for(check, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout}s")

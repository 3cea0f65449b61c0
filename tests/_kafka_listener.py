"""`txn-broker serve` in its own process, for tests with Kafka clients (tests/kafka, and the
Spark interop test in tests/spark)."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
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


def find_coordinator_frame(group: str, correlation_id: int = 7) -> bytes:
    """FindCoordinator v0 for a group, framed: (api key, version, correlation id, client id), key."""
    client, key = b"test", group.encode()
    body = struct.pack(">hhih", 10, 0, correlation_id, len(client)) + client + struct.pack(">h", len(key)) + key
    return struct.pack(">i", len(body)) + body


def read_find_coordinator(sock: socket.socket) -> tuple[int, int]:
    """A FindCoordinator v0 answer's error code and port."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data
    body = exactly(struct.unpack(">i", exactly(4))[0])
    error, _node, host_len = struct.unpack(">hih", body[4:12])
    (port,) = struct.unpack(">i", body[12 + host_len:16 + host_len])
    return error, port


def coordinator_of(listener: Listener, group: str) -> tuple[int, int]:
    """What the listener answers FindCoordinator for the group: (error code, port)."""
    with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as sock:
        sock.sendall(find_coordinator_frame(group))
        return read_find_coordinator(sock)

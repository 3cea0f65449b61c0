"""`txn-broker serve` in its own process, for tests with Kafka clients (tests/kafka, and the
Spark interop test in tests/spark)."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from txn_broker.kafka import codec

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


def create_topic_body(name: str, partitions: int = 1) -> dict[str, Any]:
    """A CreateTopics request's body for one topic."""
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout": 5000}


def produce_body(topic: str, batch: bytes, transactional_id: str | None = None, partition: int = 0) -> dict[str, Any]:
    """A Produce request's body (acks=-1) of one record batch to one partition."""
    return {"transactional_id": transactional_id, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}


class RawClient:
    """One connection to a listener, request by request (kio builds the frames), at any
    version: the request and response headers follow the version's flexibility."""

    def __init__(self, port: int, timeout: float = 20) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        return self.receive(api_key, version, self.send(api_key, version, body))

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        """Send a request without waiting for its response: its correlation id."""
        self.correlation += 1
        request_cls = codec.request_class(api_key, version)
        out = io.BytesIO()
        if request_cls.__flexible__:
            entity_writer(RequestHeaderV2)(out, RequestHeaderV2(
                request_api_key=api_key, request_api_version=version, correlation_id=self.correlation,
                client_id="t"))
        else:
            entity_writer(RequestHeaderV1)(out, RequestHeaderV1(
                request_api_key=api_key, request_api_version=version, correlation_id=self.correlation,
                client_id="t"))
        entity_writer(request_cls)(out, codec.build(request_cls, body))
        data = out.getvalue()
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        return self.correlation

    def receive(self, api_key: int, version: int, correlation: int) -> Any:
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        assert struct.unpack(">i", frame[:4])[0] == correlation
        response_cls = codec.response_class(api_key, version)
        header_cls = ResponseHeaderV1 if response_cls.__flexible__ and api_key != codec.API_VERSIONS_KEY \
            else ResponseHeaderV0  # ApiVersions answers with header v0 at every version
        _, used = entity_reader(header_cls)(frame, 0)
        response, _ = entity_reader(response_cls)(frame, used)
        return response

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()

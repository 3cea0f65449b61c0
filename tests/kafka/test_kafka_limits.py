"""The listener's bounds (txn_broker/kafka/limits.py): 500 connections announcing large
requests and sending a kilobyte each leave its memory under a stated bound while a Kafka
client is still served; connections past --max-connections or --max-connections-per-ip are
closed at once; a frame that stalls closes its connection well before the whole request's
30 s; a frame that cannot grow while the budget is spent waits and then completes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from pathlib import Path

import pytest
from _kafka_listener import Listener, wait_for
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from txn_broker.kafka.frames import FrameProtocol, FrameReader
from txn_broker.kafka.limits import ListenerLimits

MiB = 1024 * 1024
HALF_SENT = 500
#: what 500 half-sent frames may add to the listener's RSS with a budget of 32 MiB: the budget,
#: a first chunk of 64 KiB for each connection past it (32 MiB), and the connections' own cost
RSS_GROWTH_BOUND = 100 * MiB


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the listener's own input handling
def test_memory_stays_bounded_with_500_half_sent_large_frames(backend, tmp_path):
    listener = Listener(backend.env, tmp_path / "serve.log", "--max-request-bytes", str(32 * MiB),
                        "--max-queued-request-bytes", str(32 * MiB), "--frame-stall-timeout-ms", "60000")
    sockets = []
    try:
        admin = AdminClient({"bootstrap.servers": listener.bootstrap})
        admin.create_topics([NewTopic("bounded", 1)])["bounded"].result(15)
        producer = Producer({"bootstrap.servers": listener.bootstrap})
        producer.produce("bounded", value=b"warm-up")  # the produce path's imports (pyarrow, pandas) loaded
        assert producer.flush(20) == 0
        before = _rss(listener.proc.pid)
        for _ in range(HALF_SENT):
            s = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
            s.sendall(struct.pack(">i", 30 * MiB) + b"\x00\x00\x00\x09" + bytes(1020))
            sockets.append(s)
        time.sleep(1.0)
        # a well-behaved client is served while every half-sent frame is held
        producer.produce("bounded", value=b"still served")
        assert producer.flush(20) == 0
        growth = _rss(listener.proc.pid) - before
        assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth / MiB:.0f} MiB"
        assert listener.alive()
    finally:
        for s in sockets:
            s.close()
        listener.stop()


def _closed_at_once(port: int) -> bool:
    """Whether the listener closes a new connection before it sends anything."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(1.0)
        try:
            return s.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_connections_from_one_address_past_the_limit_are_closed_at_once(backend, tmp_path):
    listener = Listener(backend.env, tmp_path / "serve.log", "--max-connections-per-ip", "3")
    try:
        held = [socket.create_connection(("127.0.0.1", listener.port), timeout=5) for _ in range(3)]
        time.sleep(0.3)
        assert _closed_at_once(listener.port)
        held.pop().close()
        # the count goes down when a connection ends: a client is admitted again
        wait_for(lambda: not _closed_at_once(listener.port), what="a connection admitted again")
        for s in held:
            s.close()
        assert "--max-connections-per-ip" in listener.log()
        assert listener.alive()
    finally:
        listener.stop()


def test_connections_past_the_total_limit_are_closed_at_once():
    async def main() -> list[bytes]:
        limits = ListenerLimits(max_connections=2)

        async def serve(reader: FrameReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                await reader.next_frame(30.0, 30.0)
            writer.close()

        server = await asyncio.get_running_loop().create_server(
            lambda: FrameProtocol(FrameReader(MiB, limits=limits), serve, limits), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        got = []
        for reader, _ in clients:
            try:
                got.append(await asyncio.wait_for(reader.read(1), 1.0))
            except TimeoutError:
                got.append(b"open")
        for _, writer in clients:
            writer.close()
        server.close()
        return got

    assert asyncio.run(main()) == [b"open", b"open", b""]


def _serve_one(limits: ListenerLimits, client, frame_timeout_s: float = 30.0):
    """What the reader of the first connection gets (frames, then the error that ended it)
    while ``client(port)`` runs, and how long it took."""

    async def main():
        got: list[object] = []
        done = asyncio.Event()

        async def serve(reader: FrameReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    got.append(bytes(await reader.next_frame(30.0, frame_timeout_s)))
            except Exception as error:  # noqa: BLE001 - recorded for the test
                got.append(error)
            finally:
                writer.close()
                done.set()

        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: FrameProtocol(FrameReader(64 * MiB, limits=limits), serve, limits),
                                          "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        started = time.monotonic()
        sending = asyncio.create_task(client(port))
        await asyncio.wait_for(done.wait(), 40)
        took = time.monotonic() - started
        sending.cancel()
        server.close()
        await asyncio.sleep(0.2)  # the connection's end is seen
        return got, took

    return asyncio.run(main())


def test_a_stalled_frame_closes_its_connection_after_the_stall_timeout():
    async def stalls(port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 1000) + b"\x00\x03")
        await asyncio.sleep(60)

    got, took = _serve_one(ListenerLimits(frame_stall_timeout_s=0.5), stalls)
    assert len(got) == 1 and isinstance(got[0], TimeoutError)
    assert took < 10  # not the whole request's 30 s


def test_a_frame_waits_for_the_budget_and_completes_when_it_is_released():
    limits = ListenerLimits(max_queued_request_bytes=1 * MiB)
    body = bytes(range(256)) * (3 * 1024)  # 768 KiB: grows past its first 64 KiB chunk
    limits.memory.reserve(1 * MiB)  # the budget spent by others

    held_while_waiting = []

    async def sends(port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", len(body)) + body)
        await asyncio.sleep(0.5)
        held_while_waiting.append(limits.memory.held)
        limits.memory.release(1 * MiB)  # the others are done
        await writer.drain()
        await asyncio.sleep(1.0)
        writer.close()

    got, _ = _serve_one(limits, sends, frame_timeout_s=5.0)
    assert held_while_waiting == [1 * MiB + 64 * 1024]  # only its first chunk: it waited
    assert got[0] == body
    assert isinstance(got[1], asyncio.IncompleteReadError)
    assert limits.memory.held == 0  # handed on and the connection ended: nothing held

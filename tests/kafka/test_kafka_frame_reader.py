"""The listener's frame reader (txn_broker/kafka/frames.py) on a real loopback socket:
frames whole and in order however the bytes arrive, a frame larger than its eagerly
allocated buffer, and each way a connection ends (a bad length, a client that stops in the
middle of a frame or sends nothing, the end of the stream)."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Awaitable, Callable

import pytest

from txn_broker.kafka import frames
from txn_broker.kafka.frames import BadFrameSize, FrameProtocol, FrameReader

Client = Callable[[asyncio.StreamWriter], Awaitable[None]]


def _read(client: Client, *, count: int, idle_s: float = 5.0, frame_s: float = 5.0,
          max_bytes: int = 64 * 1024 * 1024) -> tuple[list[bytes], BaseException | None]:
    """The frames a server reads from ``client`` (at most ``count``) and what ended it."""

    async def main() -> tuple[list[bytes], BaseException | None]:
        got: list[bytes] = []
        ended: list[BaseException | None] = [None]
        done = asyncio.Event()

        async def serve(reader: FrameReader, writer: asyncio.StreamWriter) -> None:
            try:
                while len(got) < count:
                    got.append(await reader.next_frame(idle_s, frame_s))
                writer.write(b"ok")  # the StreamWriter of the protocol still writes
                await writer.drain()
            except (BadFrameSize, TimeoutError, asyncio.IncompleteReadError) as error:
                ended[0] = error
            finally:
                writer.close()
                done.set()

        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: FrameProtocol(FrameReader(max_bytes), serve), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sending = asyncio.create_task(client(writer))
        await asyncio.wait_for(done.wait(), 30)
        if ended[0] is None:
            assert await asyncio.wait_for(reader.read(2), 10) == b"ok"
        sending.cancel()
        writer.close()
        server.close()
        return got, ended[0]

    return asyncio.run(main())


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_frames_arrive_whole_and_in_order_however_they_are_split():
    bodies = [os.urandom(n) for n in (8, 100, 70_000, 3_000_000, 9)]
    stream = b"".join(_framed(b) for b in bodies)

    async def in_odd_pieces(writer: asyncio.StreamWriter) -> None:
        pos, step = 0, 1
        while pos < len(stream):
            writer.write(stream[pos:pos + step])
            await writer.drain()
            pos, step = pos + step, step * 3 + 1
            await asyncio.sleep(0)

    got, ended = _read(in_odd_pieces, count=len(bodies))
    assert ended is None
    assert got == bodies


def test_a_frame_larger_than_its_first_buffer_grows_to_its_size(monkeypatch):
    monkeypatch.setattr(frames, "EAGER_BYTES", 1000)
    body = os.urandom(1_234_567)

    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(_framed(body) + _framed(b"12345678"))
        await writer.drain()

    got, ended = _read(send, count=2)
    assert ended is None
    assert got == [body, b"12345678"]


@pytest.mark.parametrize("size", [-5, 3, 2**31 - 1])
def test_a_bad_length_ends_the_connection_before_its_bytes_are_read(size):
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(_framed(b"12345678") + struct.pack(">i", size) + b"x" * 100)
        await writer.drain()

    got, ended = _read(send, count=3, max_bytes=1_000_000)
    assert got == [b"12345678"]
    assert isinstance(ended, BadFrameSize) and ended.size == size


def test_a_client_stalling_inside_a_frame_times_out_after_the_frame_timeout():
    async def stall(writer: asyncio.StreamWriter) -> None:
        writer.write(struct.pack(">i", 1000) + b"\x00\x03")
        await writer.drain()
        await asyncio.sleep(60)

    got, ended = _read(stall, count=1, idle_s=60, frame_s=0.3)
    assert got == [] and isinstance(ended, TimeoutError)


def test_an_idle_client_times_out_and_the_end_of_the_stream_ends_the_reading():
    async def idle(writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(60)

    got, ended = _read(idle, count=1, idle_s=0.3, frame_s=60)
    assert got == [] and isinstance(ended, TimeoutError)

    async def half_then_close(writer: asyncio.StreamWriter) -> None:
        writer.write(_framed(b"abcdefgh") + struct.pack(">i", 50) + b"abc")
        await writer.drain()
        writer.close()

    got, ended = _read(half_then_close, count=2)
    assert got == [b"abcdefgh"] and isinstance(ended, asyncio.IncompleteReadError)

"""Reading a connection's request frames (a 4-byte length, then that many bytes) straight
into a buffer of the frame's size.

asyncio's ``StreamReader`` receives into new ``bytes`` of 256 KiB, appends them to its
buffer and copies a frame out of it twice: for a Produce request of megabytes that was
most of the listener's socket time (docs/kafka-protocol.md, "Performance"). Here the
transport receives into the frame's own buffer (``asyncio.BufferedProtocol``), which is
handed on as a read-only view (kio copies out what it keeps). Writing stays asyncio's
``StreamWriter``.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from .limits import FIRST_CHUNK_BYTES, ListenerLimits

#: a frame's buffer is allocated whole up to this size, and grown as it arrives above it
#: (a client announcing a large request and sending nothing costs no more than this)
EAGER_BYTES = 16 * 1024 * 1024
#: frames read ahead of the connection's handler before reading pauses
READ_AHEAD = 2


class BadFrameSize(Exception):  # noqa: N818 - a reason to close, as IncompleteReadError is
    """A frame length outside what the listener allows."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class FrameReader(asyncio.StreamReader):
    """The frames of one connection, in order (``await next_frame(...)``). A
    ``StreamReader`` only for asyncio's ``StreamWriter`` (which insists on one and asks it
    for the connection's error): none of its reading methods is used."""

    def __init__(self, max_bytes: int, min_bytes: int = 8, limits: ListenerLimits | None = None) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        # the listener's budget of bytes held by frames being read (txn_broker/kafka/limits.py)
        self._memory = limits.memory if limits is not None else None
        self.stall_timeout_s = limits.frame_stall_timeout_s if limits is not None else float("inf")
        self._held = 0  # bytes of this connection's frames (being read, or read and not yet taken)
        self._frame_held: collections.deque[int] = collections.deque()
        self._progress_at = 0.0  # monotonic time the current frame's bytes last arrived
        self._starved = False  # reading paused until the budget has room to grow the frame
        self._grow_by = 0  # bytes reserved for the frame's buffer to grow by
        self._transport: Any = None
        self._head = bytearray(4)
        self._head_at = 0
        self._body: bytearray | None = None
        self._size = 0
        self._body_at = 0
        self._body_since = 0.0  # monotonic time the current frame's length arrived
        self._frames: collections.deque[memoryview] = collections.deque()
        self._eof = False
        self._error: Exception | None = None
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    # -- the protocol's side ----------------------------------------------------------------

    def set_transport(self, transport: Any) -> None:
        self._transport = transport

    def exception(self) -> Exception | None:
        return self._error

    @property
    def peer_closed(self) -> bool:
        """The peer ended its side of the connection (frames before the end may be unread)."""
        return self._eof

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def release_all(self) -> None:
        """The connection ended: its frames' bytes go back to the listener's budget."""
        if self._memory is not None:
            self._memory.forget(self._grow_when_possible)
            self._memory.release(self._held)
        self._held = 0
        self._frame_held.clear()

    def set_exception(self, exc: Exception) -> None:
        self._error = exc
        self._wake()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is None:
            return memoryview(self._head)[self._head_at:]
        if self._body_at == len(self._body):  # a frame above its first buffer: grow it
            extra = self._grow_by
            if not extra:  # (not reached: a starved connection is paused, and asks for no buffer)
                extra = min(self._size - len(self._body), FIRST_CHUNK_BYTES)
                self._hold(extra, force=True)
            self._body.extend(bytes(extra))
            self._grow_by = 0
        return memoryview(self._body)[self._body_at:]

    def _hold(self, size: int, *, force: bool = False) -> bool:
        if self._memory is not None:
            if force:
                self._memory.reserve(size)
            elif not self._memory.try_reserve(size):
                return False
        self._held += size
        return True

    def _grow(self) -> bool:
        """Reserve the bytes the frame's full buffer grows by (a frame above what was first
        allocated; get_buffer grows it, the transport holding the buffer until then), as far
        as the listener's budget allows; else pause reading until it does."""
        assert self._body is not None
        left = self._size - len(self._body)
        for extra in (min(left, len(self._body)), min(left, FIRST_CHUNK_BYTES)):
            if self._hold(extra):
                self._grow_by = extra
                return True
        self._starved = True
        self._pause()
        assert self._memory is not None
        self._memory.wait(self._grow_when_possible)
        return False

    def _grow_when_possible(self) -> None:
        if not self._starved or self._body is None:
            return
        if self._grow():
            self._starved = False
            if self._paused and len(self._frames) < READ_AHEAD and self._transport is not None:
                self._paused = False
                self._transport.resume_reading()

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is None:
            self._head_at += nbytes
            if self._head_at < 4:
                return
            self._head_at = 0
            size = int.from_bytes(self._head, "big", signed=True)
            if not self.min_bytes <= size <= self.max_bytes:
                self._error = BadFrameSize(size)
                self._pause()
                self._wake()
                return
            self._size, self._body_at, self._body_since = size, 0, time.monotonic()
            self._progress_at = self._body_since
            first = min(size, EAGER_BYTES)
            if not self._hold(first):  # the budget is short: start small, grow as bytes arrive
                first = min(size, FIRST_CHUNK_BYTES)
                self._hold(first, force=True)
            self._body = bytearray(first)
            self._wake()  # the frame's own timeout applies from now
            return
        self._body_at += nbytes
        self._progress_at = time.monotonic()
        if self._body_at < self._size:
            if self._body_at == len(self._body):
                self._grow()
            return
        self._frames.append(memoryview(self._body).toreadonly())  # kio reads it, copying what it keeps
        self._frame_held.append(len(self._body))
        self._body = None
        if len(self._frames) >= READ_AHEAD:
            self._pause()
        self._wake()

    def _pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- the handler's side -----------------------------------------------------------------

    async def next_frame(self, idle_timeout_s: float, frame_timeout_s: float) -> memoryview:
        """The next frame, a read-only view of its own buffer. Raises TimeoutError
        (nothing for ``idle_timeout_s``, or a frame's bytes not all there
        ``frame_timeout_s`` after its length), BadFrameSize, IncompleteReadError at the end
        of the stream, or the connection's error."""
        waiting_since = time.monotonic()
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise asyncio.IncompleteReadError(b"", None)
            if self._paused and not self._starved and len(self._frames) < READ_AHEAD and self._transport is not None:
                self._paused = False
                self._transport.resume_reading()
            # a frame begun has frame_timeout_s for its bytes; else the wait is idle time
            # and its bytes may not stall for longer than stall_timeout_s
            started = self._body is not None
            deadline = (min(self._body_since + frame_timeout_s, self._progress_at + self.stall_timeout_s)
                        if started else waiting_since + idle_timeout_s)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete request in time")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._waiter, left)
            except TimeoutError:
                continue  # the deadline is checked again (it may have moved)
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        taken = self._frame_held.popleft()
        self._held -= taken
        if self._memory is not None:  # handed on: no longer a request being read
            self._memory.release(taken)
        if (self._paused and not self._starved and len(self._frames) < READ_AHEAD and self._transport is not None
                and self._error is None):
            self._paused = False
            self._transport.resume_reading()
        return frame


class FrameProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """asyncio's stream protocol (its ``StreamWriter``, flow control and close waiter)
    with a :class:`FrameReader` receiving the bytes."""

    def __init__(self, reader: FrameReader, connected: Any, limits: ListenerLimits | None = None) -> None:
        super().__init__(reader, connected)
        self._frames = reader
        self._limits = limits
        self._ip: str | None = None  # set once the connection is admitted

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if self._limits is None:
            return
        peer = transport.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if self._limits.connections.admit(ip):
            self._ip = ip
        else:
            transport.abort()  # past --max-connections or --max-connections-per-ip

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ip is not None and self._limits is not None:
            self._limits.connections.release(self._ip)
            self._ip = None
        self._frames.release_all()
        super().connection_lost(exc)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._frames.buffer_updated(nbytes)

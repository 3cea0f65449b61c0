"""Whether the client that sent a request still waits for its answer.

A client that times a request out closes the connection and sends the request again, often
to another listener (any listener coordinates transactions). The first copy may still sit
unread in the socket of a listener that was stopped (SIGSTOP, a long pause): read once that
listener resumes, an EndTxn would commit the client's *next* transaction, a TxnOffsetCommit
would stage old offsets in it. Kafka's protocol gives such a request nothing that tells it
from a fresh one (before EndTxn v5), but its connection tells: the client closed it.

So the requests that change a transaction or a group's offsets check, in the same database
transaction as their change and after taking the transactional id's lock, that the client has
not closed the connection (``ClientGoneError`` otherwise: nothing is written, and nobody reads
the answer). A client's retry elsewhere waits for that lock, so the first copy either ran
before the retry or never runs.
"""

from __future__ import annotations

import select
from typing import Any

from .errors import ClientGoneError

#: the peer's FIN, seen by the kernel even while request bytes before it are unread (Linux);
#: elsewhere only asyncio's own end of stream counts
_RDHUP = getattr(select, "POLLRDHUP", 0)
_GONE = _RDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL


class PeerProbe:
    """Answers, from any thread, whether the peer of one connection has closed it."""

    def __init__(self, reader: Any, sock: Any) -> None:
        self._reader = reader  # a FrameReader: ``peer_closed`` once asyncio read the end of stream
        self._fd = sock.fileno() if sock is not None else -1

    def closed(self) -> bool:
        if self._reader.peer_closed:
            return True
        if self._fd < 0 or not _RDHUP:
            return False
        poller = select.poll()
        poller.register(self._fd, _GONE)
        return any(events & _GONE for _, events in poller.poll(0))

    def check(self) -> None:
        """Raise ClientGoneError if the peer closed the connection."""
        if self.closed():
            raise ClientGoneError("the client closed the connection before its request ran; "
                                  "it retries the request, if it still wants it")

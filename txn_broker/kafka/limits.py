"""The listener's bounds on what clients can make it hold (docs/kafka-protocol.md,
"Robustness"): the bytes of requests being read across all connections
(``--max-queued-request-bytes``, Kafka's ``queued.max.request.bytes``), connections in total
and per client address (``--max-connections``, ``--max-connections-per-ip``, Kafka's
``max.connections`` and ``max.connections.per.ip``), and how long a frame may stall.

The frame reader (txn_broker/kafka/frames.py) asks :class:`RequestMemory` before it makes a
frame's buffer larger; when the budget is spent, that connection stops being read until
another frame is handed on or a connection ends. A connection past either connection limit
is closed as soon as it is accepted.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable

log = logging.getLogger("txn_broker.kafka")

#: defaults of the settings (the CLI's and KafkaServer's)
MAX_QUEUED_REQUEST_BYTES = 256 * 1024 * 1024
MAX_CONNECTIONS = 4096
MAX_CONNECTIONS_PER_IP = 1024
#: a frame begun whose bytes stop arriving this long closes its connection
FRAME_STALL_TIMEOUT_S = 5.0
#: what a frame's buffer starts at when the budget has no room for more (it may overdraw
#: the budget: a frame has to start somewhere, and connections are bounded)
FIRST_CHUNK_BYTES = 64 * 1024


class RequestMemory:
    """Bytes held by frames being read, across every connection of a listener."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._waiting: collections.deque[Callable[[], None]] = collections.deque()

    def try_reserve(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def reserve(self, size: int) -> None:
        """Hold ``size`` whether or not the budget has room (a frame's first chunk)."""
        self.held += size

    def release(self, size: int) -> None:
        self.held = max(0, self.held - size)
        waiting, self._waiting = self._waiting, collections.deque()
        for retry in waiting:  # each retries its reservation, and waits again if it fails
            retry()

    def wait(self, retry: Callable[[], None]) -> None:
        """Call ``retry`` once some bytes are released."""
        self._waiting.append(retry)

    def forget(self, retry: Callable[[], None]) -> None:
        if retry in self._waiting:
            self._waiting.remove(retry)


class ConnectionCount:
    """Open connections, in total and per client address."""

    def __init__(self, limit: int, per_ip: int) -> None:
        self.limit = limit
        self.per_ip = per_ip
        self.total = 0
        self.by_ip: collections.Counter[str] = collections.Counter()

    def admit(self, ip: str) -> bool:
        if self.total >= self.limit:
            log.warning("refusing a connection from %s: %d connections are open (--max-connections)",
                        ip, self.total)
            return False
        if self.by_ip[ip] >= self.per_ip:
            log.warning("refusing a connection from %s: it has %d open (--max-connections-per-ip)",
                        ip, self.by_ip[ip])
            return False
        self.total += 1
        self.by_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]


@dataclasses.dataclass
class ListenerLimits:
    """A listener's limits; one instance is shared by all its connections."""

    max_queued_request_bytes: int = MAX_QUEUED_REQUEST_BYTES
    max_connections: int = MAX_CONNECTIONS
    max_connections_per_ip: int = MAX_CONNECTIONS_PER_IP
    frame_stall_timeout_s: float = FRAME_STALL_TIMEOUT_S
    memory: RequestMemory = dataclasses.field(init=False)
    connections: ConnectionCount = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.memory = RequestMemory(self.max_queued_request_bytes)
        self.connections = ConnectionCount(self.max_connections, self.max_connections_per_ip)

"""Fetch sessions (KIP-227): a consumer of many partitions sends them all once, then only
those whose fetch position changed, and hears back only about partitions with something
new.

A Fetch (v7+) carries a session id and epoch:

* epoch -1: no session (a full fetch answered in full, session id 0); a session id given is
  closed.
* epoch 0: a full fetch that opens a session (closing the one named, if any): the answer
  carries the new session's id, or 0 when the cache has no room.
* epoch > 0: an incremental fetch of session ``session_id``, whose expected epoch it must
  be. The request lists only the partitions added or changed (new fetch offset or max
  bytes) and ``forgotten_topics_data`` those to drop; the others are fetched from the
  offsets the session holds. The answer lists only partitions with records, an error, or a
  changed high watermark, last stable offset or log start offset. An unknown session
  (evicted, or this listener restarted) is FETCH_SESSION_ID_NOT_FOUND and a wrong epoch
  INVALID_FETCH_SESSION_EPOCH; the client then starts over with a full fetch.

The cache is the listener's (sessions are not shared between listeners, as Kafka's are per
broker) and bounded by ``slots`` sessions (Kafka's ``max.incremental.fetch.session.cache.slots``,
default 1000). A new session takes the slot of the least recently used session idle longer
than ``eviction_ms`` (Kafka's ``min.incremental.fetch.session.eviction.ms``, 120 s), else of
the smallest session if it has fewer partitions than the new one (Kafka favours larger
sessions too), else gets none. A session belongs to the principal that opened it: another
principal naming its id gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

#: Kafka's max.incremental.fetch.session.cache.slots
DEFAULT_SLOTS = 1000
#: Kafka's min.incremental.fetch.session.eviction.ms
DEFAULT_EVICTION_MS = 120_000
#: the epoch of a request that wants no session, and of one that opens a session
FINAL_EPOCH, INITIAL_EPOCH = -1, 0
#: a session id that names no session
NO_SESSION = 0

Key = tuple[str, int]


@dataclass
class CachedPartition:
    """A partition of a session: where the client fetches from, and what it was last told."""

    fetch_offset: int
    max_bytes: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclass
class FetchSession:
    session_id: int
    principal: str
    #: the epoch the next incremental fetch must carry
    epoch: int
    partitions: dict[Key, CachedPartition] = field(default_factory=dict)
    last_used: float = 0.0


@dataclass(frozen=True)
class PartitionFetch:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int


@dataclass
class FetchPlan:
    """What one Fetch request fetches, and how its answer is filtered."""

    #: the session id to answer with (0: none)
    session_id: int
    #: the partitions to fetch, in order
    partitions: list[PartitionFetch]
    #: None: a sessionless or full fetch
    session: FetchSession | None = None
    incremental: bool = False
    #: a session error (the answer is that code and no partitions)
    error: ErrorCode = ErrorCode.none

    def must_answer(self, topic: str, partition: int, error: ErrorCode, records: int, high_watermark: int,
                    last_stable_offset: int, log_start_offset: int) -> bool:
        """Whether the answer lists this partition (always, unless incremental: then only with
        records, an error, or a changed end), remembering what the client is told."""
        cached = self.session.partitions.get((topic, partition)) if self.session is not None else None
        if cached is None:
            return True
        changed = (cached.high_watermark, cached.last_stable_offset, cached.log_start_offset) != (
            high_watermark, last_stable_offset, log_start_offset)
        if error == ErrorCode.none:
            cached.high_watermark, cached.last_stable_offset = high_watermark, last_stable_offset
            cached.log_start_offset = log_start_offset
        return not self.incremental or records > 0 or error != ErrorCode.none or changed


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1, 2, ... wrapping from 2^31-1 back to 1."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class FetchSessionCache:
    """The listener's fetch sessions; safe to use from several threads."""

    def __init__(self, slots: int = DEFAULT_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.eviction_s = eviction_ms / 1000
        self._clock = clock
        #: least recently used first
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._lock = threading.Lock()
        self._random = random.Random()
        #: sessions evicted to make room for others (for tests and metrics)
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def plan(self, session_id: int, epoch: int, principal: str, wanted: Iterable[PartitionFetch],
             forgotten: Iterable[Key]) -> FetchPlan:
        """The plan of one Fetch request (see the module's docstring for the rules)."""
        wanted = list(wanted)
        with self._lock:
            if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
                if session_id != NO_SESSION:
                    self._close(session_id, principal)
                if epoch == FINAL_EPOCH:
                    return FetchPlan(NO_SESSION, wanted)
                session = self._open(principal, wanted)
                if session is None:
                    return FetchPlan(NO_SESSION, wanted)
                return FetchPlan(session.session_id, wanted, session)
            if epoch < FINAL_EPOCH:
                return FetchPlan(NO_SESSION, [], error=ErrorCode.invalid_fetch_session_epoch)
            session = self._sessions.get(session_id)
            if session is None or session.principal != principal:
                return FetchPlan(NO_SESSION, [], error=ErrorCode.fetch_session_id_not_found)
            if epoch != session.epoch:
                return FetchPlan(NO_SESSION, [], error=ErrorCode.invalid_fetch_session_epoch)
            session.epoch = next_epoch(session.epoch)
            for key in forgotten:
                session.partitions.pop(key, None)
            for p in wanted:
                cached = session.partitions.get((p.topic, p.partition))
                if cached is None:
                    session.partitions[(p.topic, p.partition)] = CachedPartition(p.fetch_offset, p.max_bytes)
                else:
                    cached.fetch_offset, cached.max_bytes = p.fetch_offset, p.max_bytes
            self._touch(session)
            every = [PartitionFetch(t, n, c.fetch_offset, c.max_bytes) for (t, n), c in session.partitions.items()]
            return FetchPlan(session.session_id, every, session, incremental=True)

    def _close(self, session_id: int, principal: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None and session.principal == principal:
            del self._sessions[session_id]

    def _touch(self, session: FetchSession) -> None:
        session.last_used = self._clock()
        self._sessions.move_to_end(session.session_id)

    def _open(self, principal: str, wanted: list[PartitionFetch]) -> FetchSession | None:
        if self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots and not self._evict_for(len(wanted)):
            return None
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self._sessions:
            session_id = self._random.randint(1, 2**31 - 1)
        session = FetchSession(session_id, principal, next_epoch(INITIAL_EPOCH),
                               {(p.topic, p.partition): CachedPartition(p.fetch_offset, p.max_bytes)
                                for p in wanted})
        self._sessions[session_id] = session
        self._touch(session)
        return session

    def _evict_for(self, size: int) -> bool:
        """Make room for a session of ``size`` partitions; whether it could."""
        now = self._clock()
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used >= self.eviction_s:
            victim = oldest
        else:
            victim = min(self._sessions.values(), key=lambda s: len(s.partitions))
            if len(victim.partitions) >= size:
                return False
        del self._sessions[victim.session_id]
        self.evictions += 1
        return True

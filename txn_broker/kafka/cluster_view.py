"""Which listener coordinates which group, as one listener sees it from its last read of the
table ``kafka_listeners``, and for how long that answer is safe to act on.

Group membership lives in the memory of one listener, the group's coordinator, picked by
hashing the group id over the listeners that coordinate groups. Listeners read that table at
different moments (every heartbeat, every Metadata and FindCoordinator), so two of them may
briefly disagree, and a listener that was stopped (SIGSTOP, a long pause) wakes up with the
view it had before. Two listeners both acting as a group's coordinator would each hand the
group's partitions to the members they know, and both members would copy them. So a view
is acted on only while no other listener can hold a different one:

- it expires ``VIEW_TTL_MS`` after its read began, and when any listener in it could have
  been taken as down (its last heartbeat ``LISTENER_EXPIRY_MS`` old); a listener whose view
  expired coordinates nothing until it reads again (a resumed listener starts there);
- a listener that starts, or comes back after being taken as down, begins a new term and
  coordinates groups only ``SETTLE_MS`` (≥ the view TTL) after its term began, when every
  view read without it has expired (at once when no other listener is up: no view can then
  be in force);
- for ``GUARD_MS`` either side of the moment a listener's term settles, nobody coordinates:
  listeners predict that moment from their own reads, which take different times.
"""

from __future__ import annotations

import zlib

from .backend import ListenerRow, Node

#: a listener whose last heartbeat is this old is taken as down
LISTENER_EXPIRY_MS = 6000
#: a view of the cluster is acted on for at most this long after its read began
VIEW_TTL_MS = 4000
#: a listener's term settles (it coordinates groups) this long after it began
SETTLE_MS = VIEW_TTL_MS
#: nobody coordinates within this long of a term settling
GUARD_MS = 500


class ClusterView:
    """The listeners from one read, begun at ``read_at`` (``time.monotonic()``)."""

    def __init__(self, rows: list[ListenerRow], read_at: float) -> None:
        live = [r for r in rows if r.age_ms <= LISTENER_EXPIRY_MS]
        self.read_at = read_at
        self.live = [r.node for r in live]
        #: the listeners Metadata also lists (down for a short while)
        self.listed = [r.node for r in rows]
        # durations measured from the read's start, so each deadline comes no later than
        # the moment it stands for by the database's clock
        bounds = [VIEW_TTL_MS] + [LISTENER_EXPIRY_MS - r.age_ms for r in live]
        self.valid_until = read_at + min(bounds) / 1000
        self._started = {r.node.node_id: r.started_ms for r in live}
        self._settles = {r.node.node_id: read_at + (SETTLE_MS - r.term_ms) / 1000
                         for r in live if r.term_ms < SETTLE_MS}

    @classmethod
    def empty(cls) -> ClusterView:
        return cls([], float("-inf"))

    def coordinators(self, now: float) -> list[Node] | None:
        """The listeners coordinating groups at ``now``, by node id; None when this view may
        not be acted on (expired, or too near a term settling)."""
        if now >= self.valid_until:
            return None
        if any(abs(now - at) < GUARD_MS / 1000 for at in self._settles.values()):
            return None
        return [n for n in self.live if self._settles.get(n.node_id, now) <= now]

    def started_ms(self, node_id: int) -> int | None:
        """When a live listener's term began (the term's identity), None if it is not live."""
        return self._started.get(node_id)

    def coordinator(self, group_id: str, now: float) -> Node | None:
        """The listener coordinating ``group_id`` at ``now`` (None: none may be named)."""
        nodes = self.coordinators(now)
        if not nodes:
            return None
        return nodes[zlib.crc32(f"group:{group_id}".encode()) % len(nodes)]

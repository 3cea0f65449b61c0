"""Kafka's classic consumer group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
so that ``subscribe()`` works: membership and generations live in the listener's memory
(one listener is the coordinator of every group); committed offsets are the broker's.

A rebalance starts when a member joins or leaves, or misses its session timeout. It
completes when every known member has joined again, or after the rebalance timeout
(members that did not rejoin are removed); the first member to join is the leader, which
computes the assignment and sends it with SyncGroup. The broker never reads the protocol
metadata or the assignments: they are opaque bytes, as in Kafka.

With several listeners, a group's coordinator is the listener its id hashes to
(cluster_view.py). A listener keeps a group's state only while it may act as its coordinator:
once it may not (the group moved, or its view of the cluster ran out, as after a SIGSTOP),
the group is unloaded, as Kafka's coordinator unloads the groups of a partition it no longer
leads; requests waiting in it are answered NOT_COORDINATOR and its members join again
wherever the group now is. A rebalance completes only in the listener that may coordinate
the group at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

#: a new group waits this long for more members before its first generation
#: (Kafka's group.initial.rebalance.delay.ms, shortened)
INITIAL_REBALANCE_DELAY_S = 0.3


@dataclass
class Member:
    member_id: str
    protocols: list[tuple[str, bytes]]
    session_timeout_s: float
    rebalance_timeout_s: float
    protocol_type: str
    #: KIP-345: a static member's id, kept across its restarts (None: a dynamic member)
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    last_seen: float = field(default_factory=time.monotonic)
    joined: asyncio.Future[dict[str, Any]] | None = None
    synced: asyncio.Future[dict[str, Any]] | None = None
    assignment: bytes = b""


@dataclass
class Group:
    group_id: str
    state: str = "Empty"  # Empty, PreparingRebalance, CompletingRebalance, Stable
    generation: int = 0
    protocol: str | None = None
    protocol_type: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: static members: group.instance.id -> the member id it has now
    static: dict[str, str] = field(default_factory=dict)
    rebalance: asyncio.Task[None] | None = None


def _always(group_id: str) -> bool:
    return True


class GroupCoordinator:
    def __init__(self, owns: Callable[[str], bool] = _always) -> None:
        """``owns(group_id)``: whether this listener may act as the group's coordinator now."""
        self.owns = owns
        self.groups: dict[str, Group] = {}
        self._reaper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._expire_sessions())

    async def stop(self) -> None:
        tasks = [g.rebalance for g in self.groups.values() if g.rebalance] + ([self._reaper] if self._reaper else [])
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    def check_member(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """OffsetCommit's check, as Kafka's coordinator makes it: a commit with a generation
        must come from a member of it. While the group prepares a rebalance its members still
        commit under the current generation (KIP-429: a cooperative member commits the
        partitions it gives up, and keeps the others, while the others rejoin); between the
        JoinGroup answers and the leader's SyncGroup, REBALANCE_IN_PROGRESS."""
        if generation < 0:
            return ErrorCode.none
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        if group.state == "CompletingRebalance":
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def check_txn_member(self, group_id: str, member_id: str, generation: int, instance_id: str | None) -> ErrorCode:
        """TxnOffsetCommit's check (KIP-447), as Kafka's coordinator makes it: offsets sent with
        a consumer's group metadata (a member id, generation or group.instance.id) commit only
        if that member is still in the group at that generation, so that a copier that lost its
        partitions in a rebalance cannot commit its transaction over the new owner's."""
        if generation < 0 and not member_id and not instance_id:
            return ErrorCode.none  # offsets without a consumer group member (assign())
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.illegal_generation if generation >= 0 else ErrorCode.unknown_member_id
        if instance_id and group.static.get(instance_id, member_id) != member_id:
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    # -- JoinGroup -------------------------------------------------------------------------

    async def join(self, req: Any, version: int, client_id: str = "", client_host: str = "") -> dict[str, Any]:
        group = self.groups.setdefault(req.group_id, Group(req.group_id))
        failed = {"throttle_time": 0, "generation_id": -1, "protocol_type": None, "protocol_name": None,
                  "leader": "", "member_id": req.member_id, "members": []}
        if group.protocol_type is not None and group.members and req.protocol_type != group.protocol_type:
            return {**failed, "error_code": ErrorCode.inconsistent_group_protocol}
        member_id = req.member_id
        instance_id = getattr(req, "group_instance_id", None)
        known = group.static.get(instance_id) if instance_id else None
        if member_id and known is not None and member_id != known:
            return {**failed, "error_code": ErrorCode.fenced_instance_id}  # an older instance of it
        if member_id and member_id not in group.members:
            return {**failed, "error_code": ErrorCode.unknown_member_id}
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        if not member_id and instance_id and known is not None and known in group.members:
            # KIP-345: a static member back from a restart takes its old place under a new
            # member id; a stable group with the same protocols keeps its assignment
            member_id = self._replace_static(group, known, instance_id)
            returning = group.members[member_id]
            returning.client_id, returning.client_host = client_id, client_host
            if group.state == "Stable" and group.protocol in {name for name, _ in protocols}:
                returning.protocols = protocols
                returning.last_seen = time.monotonic()
                return self._join_response(group, returning)
        if not member_id:
            member_id = f"{req.group_id}-{uuid.uuid4()}"
        session = _seconds(req.session_timeout)
        rebalance = _seconds(getattr(req, "rebalance_timeout", req.session_timeout))
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(member_id, protocols, session, rebalance, req.protocol_type,
                                                       instance_id, client_id, client_host)
            if instance_id:
                group.static[instance_id] = member_id
        else:
            member.protocols = protocols
            member.last_seen = time.monotonic()
        group.protocol_type = req.protocol_type
        member.joined = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group)
        self._maybe_complete(group)
        return await member.joined

    def _replace_static(self, group: Group, old_id: str, instance_id: str) -> str:
        """The static member ``old_id`` under a new member id, in the same place; requests
        still waiting under the old id are answered FENCED_INSTANCE_ID."""
        new_id = f"{group.group_id}-{uuid.uuid4()}"
        member = group.members.pop(old_id)
        for future in (member.joined, member.synced):
            if future is not None and not future.done():
                future.set_result({"throttle_time": 0, "error_code": ErrorCode.fenced_instance_id,
                                   "generation_id": -1, "leader": "", "member_id": old_id, "members": [],
                                   "assignment": b""})
        member.joined = member.synced = None
        member.member_id = new_id
        group.members[new_id] = member
        group.static[instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        return new_id

    def _join_response(self, group: Group, member: Member) -> dict[str, Any]:
        """JoinGroup's answer for ``member`` in the group's current generation (the leader
        gets the members and their metadata)."""
        listing = [{"member_id": o.member_id, "group_instance_id": o.group_instance_id,
                    "metadata": dict(o.protocols).get(group.protocol or "", b"")} for o in group.members.values()]
        return {"throttle_time": 0, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol, "leader": group.leader, "member_id": member.member_id,
                "members": listing if member.member_id == group.leader else [],
                "error_code": ErrorCode.none if group.protocol else ErrorCode.inconsistent_group_protocol}

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == "PreparingRebalance":
            return
        for m in group.members.values():  # a sync waiting for the old generation ends now
            if m.synced is not None and not m.synced.done():
                m.synced.set_result({"throttle_time": 0, "error_code": ErrorCode.rebalance_in_progress,
                                     "assignment": b""})
        delay = INITIAL_REBALANCE_DELAY_S if group.state == "Empty" else max(
            (m.rebalance_timeout_s for m in group.members.values()), default=1.0)
        group.state = "PreparingRebalance"
        group.rebalance = asyncio.get_running_loop().create_task(self._rebalance_deadline(group, delay))

    async def _rebalance_deadline(self, group: Group, delay: float) -> None:
        await asyncio.sleep(delay)
        if group.state != "PreparingRebalance":
            return
        for member_id in [m for m, member in group.members.items()
                          if member.joined is None or member.joined.done()]:
            self._forget_static(group, group.members.pop(member_id))  # did not rejoin in time
        self._complete(group)

    def _maybe_complete(self, group: Group) -> None:
        if group.state != "PreparingRebalance" or (group.generation == 0 and group.rebalance and
                                                   not group.rebalance.done() and len(group.members) < 2):
            return
        if all(m.joined is not None and not m.joined.done() for m in group.members.values()):
            if group.rebalance is not None and group.rebalance is not asyncio.current_task():
                group.rebalance.cancel()
            self._complete(group)

    def _complete(self, group: Group) -> None:
        if not self.owns(group.group_id):  # the group moved meanwhile: no generation here
            self.unload(group.group_id)
            return
        if not group.members:
            group.state, group.leader, group.protocol = "Empty", None, None
            return
        group.generation += 1
        members = list(group.members.values())
        if group.leader not in group.members:
            group.leader = members[0].member_id
        common = set.intersection(*({name for name, _ in m.protocols} for m in members))
        leader = group.members[group.leader]
        group.protocol = next((name for name, _ in leader.protocols if name in common), None)
        group.state = "CompletingRebalance"
        for m in members:
            m.last_seen = time.monotonic()
            m.assignment = b""
            if m.joined is not None and not m.joined.done():
                m.joined.set_result(self._join_response(group, m))

    # -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

    async def sync(self, req: Any) -> dict[str, Any]:
        group = self.groups.get(req.group_id)
        out = {"throttle_time": 0, "protocol_type": getattr(req, "protocol_type", None),
               "protocol_name": getattr(req, "protocol_name", None), "assignment": b""}
        if group is None or req.member_id not in group.members:
            return {**out, "error_code": ErrorCode.unknown_member_id}
        if int(req.generation_id) != group.generation:
            return {**out, "error_code": ErrorCode.illegal_generation}
        if group.state == "PreparingRebalance":
            return {**out, "error_code": ErrorCode.rebalance_in_progress}
        member = group.members[req.member_id]
        member.last_seen = time.monotonic()
        if req.member_id == group.leader and group.state == "CompletingRebalance":
            given = {a.member_id: bytes(a.assignment) for a in req.assignments}
            group.state = "Stable"
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
                if m.synced is not None and not m.synced.done():
                    m.synced.set_result({**out, "error_code": ErrorCode.none, "assignment": m.assignment})
        if group.state == "Stable":
            return {**out, "error_code": ErrorCode.none, "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol, "assignment": member.assignment}
        member.synced = asyncio.get_running_loop().create_future()
        result = await member.synced
        return {**result, "protocol_type": group.protocol_type, "protocol_name": group.protocol}

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None = None) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is not None and instance_id and group.static.get(instance_id, member_id) != member_id:
            return ErrorCode.fenced_instance_id  # KIP-345: a newer instance took its place
        if group is None or member_id not in group.members:
            return ErrorCode.unknown_member_id
        group.members[member_id].last_seen = time.monotonic()
        if group.state == "PreparingRebalance":
            return ErrorCode.rebalance_in_progress
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.unknown_member_id
        self._remove(group, member_id)
        return ErrorCode.none

    def unload(self, group_id: str) -> None:
        """Forget a group this listener may no longer coordinate; requests waiting in it are
        answered NOT_COORDINATOR (their clients find the coordinator again)."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        if group.rebalance is not None and group.rebalance is not asyncio.current_task():
            group.rebalance.cancel()
        for member in group.members.values():
            for future in (member.joined, member.synced):
                if future is not None and not future.done():
                    future.set_result({"throttle_time": 0, "error_code": ErrorCode.not_coordinator,
                                       "generation_id": -1, "leader": "", "member_id": member.member_id,
                                       "members": [], "assignment": b""})

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        self._forget_static(group, member)
        for future in (member.joined, member.synced):
            if future is not None and not future.done():
                future.set_result({"throttle_time": 0, "error_code": ErrorCode.unknown_member_id,
                                   "generation_id": -1, "leader": "", "member_id": member_id, "members": [],
                                   "assignment": b""})
        if not group.members:
            if group.rebalance is not None:
                group.rebalance.cancel()
            group.state, group.leader, group.protocol = "Empty", None, None
            return
        if group.state == "PreparingRebalance":
            self._maybe_complete(group)
        else:
            self._prepare_rebalance(group)

    def active(self, group_id: str) -> bool:
        """Whether the group has members in this listener."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def forget(self, group_id: str) -> None:
        """Drop a group without members (DeleteGroups)."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            del self.groups[group_id]

    def subscribed(self, group_id: str, topic: str) -> bool:
        """Whether a member of the group subscribes to ``topic`` (read from the consumer
        protocol's subscriptions; a group of another protocol, or metadata that does not
        read as one, counts as subscribed to every topic)."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return False
        for member in group.members.values():
            topics = subscription_topics(dict(member.protocols).get(group.protocol or "", b""))
            if topics is None or topic in topics:
                return True
        return False

    @staticmethod
    def _forget_static(group: Group, member: Member) -> None:
        if member.group_instance_id is not None and group.static.get(member.group_instance_id) == member.member_id:
            del group.static[member.group_instance_id]

    def static_member(self, group_id: str, instance_id: str) -> str:
        """The member id a static member has now ('' if none)."""
        group = self.groups.get(group_id)
        return group.static.get(instance_id, "") if group is not None else ""

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for group in list(self.groups.values()):
                if not self.owns(group.group_id):
                    self.unload(group.group_id)
                    continue
                for member_id, m in list(group.members.items()):
                    waiting = m.joined is not None and not m.joined.done()
                    if not waiting and now - m.last_seen > m.session_timeout_s:
                        self._remove(group, member_id)


def _seconds(value: Any) -> float:
    return value.total_seconds() if hasattr(value, "total_seconds") else int(value) / 1000


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a consumer protocol subscription (ConsumerProtocolSubscription: a
    version, then the topics as an array of strings), None if it does not read as one."""
    try:
        count = int.from_bytes(metadata[2:6], "big", signed=True)
        position, topics = 6, set()
        for _ in range(count):
            size = int.from_bytes(metadata[position:position + 2], "big", signed=True)
            if size < 0 or position + 2 + size > len(metadata):
                return None
            topics.add(metadata[position + 2:position + 2 + size].decode("utf-8"))
            position += 2 + size
        return topics if len(metadata) >= 6 and count >= 0 else None
    except (UnicodeDecodeError, ValueError):
        return None

"""A group's committed offsets: OffsetCommit (8) and OffsetFetch (9)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..authorizer import Operation, ResourceType
from .base import Api, Listener, Payload, RequestContext, allows


async def offset_commit(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    generation = int(getattr(req, "generation_id_or_member_epoch", -1))
    if not allows(server, ctx, Operation.READ, ResourceType.GROUP, req.group_id):
        group_code = ErrorCode.group_authorization_failed
    else:
        group_code = server.groups.check_member(req.group_id, req.member_id, generation)
        if generation >= 0 and server.not_coordinator(req.group_id):
            group_code = ErrorCode.not_coordinator
    offsets = {(t.name, int(p.partition_index)): int(p.committed_offset) for t in req.topics for p in t.partitions}
    code = group_code
    if code == ErrorCode.none and offsets:
        _, code = await server.attempt(server.backend.commit_offsets, req.group_id, offsets)
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in req.topics]}


async def offset_fetch(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    if not allows(server, ctx, Operation.DESCRIBE, ResourceType.GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "topics": []}
    if req.topics is None:  # every partition the group has offsets for
        found, _ = await server.attempt(server.backend.group_partitions, req.group_id)
        wanted: list[tuple[str, int]] = found or []
    else:
        wanted = [(t.name, int(p)) for t in req.topics for p in t.partition_indexes]
    got, code = await server.attempt(server.backend.committed, req.group_id, wanted)
    unstable: set[tuple[str, int]] = set()
    if getattr(req, "require_stable", False) and got is not None:
        unstable = await server.call(server.backend.pending_offsets, req.group_id, wanted)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, p in wanted:
        part_code = code if got is None else (
            ErrorCode.unstable_offset_commit if (topic, p) in unstable else ErrorCode.none)
        by_topic.setdefault(topic, []).append({
            "partition_index": p, "committed_offset": -1 if got is None else got[(topic, p)],
            "committed_leader_epoch": -1, "metadata": "", "error_code": part_code})
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


APIS = (
    Api(8, "OffsetCommit", 2, 8, offset_commit),
    Api(9, "OffsetFetch", 1, 7, offset_fetch),
)

"""A group's committed offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...models import OffsetAndMetadata
from ..authorizer import Operation, ResourceType
from ..errors import error_code
from .base import Api, Listener, Payload, RequestContext, allows


def committed_value(partition: Any) -> OffsetAndMetadata:
    """An OffsetCommit or TxnOffsetCommit partition's offset, metadata and leader epoch
    (-1 on the wire: none)."""
    epoch = int(getattr(partition, "committed_leader_epoch", -1))
    return OffsetAndMetadata(int(partition.committed_offset), partition.committed_metadata or "",
                             None if epoch < 0 else epoch)


async def offset_commit(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    generation = int(getattr(req, "generation_id_or_member_epoch", -1))
    term = None  # the coordinator's term in which a group member's commit was checked
    if not allows(server, ctx, Operation.READ, ResourceType.GROUP, req.group_id):
        group_code = ErrorCode.group_authorization_failed
    else:
        group_code = server.groups.check_member(req.group_id, req.member_id, generation)
        if generation >= 0:
            term = server.coordinator_term(req.group_id)
            if term is None:
                group_code = ErrorCode.not_coordinator
    codes: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for t in req.topics:
        topic_refused = not allows(server, ctx, Operation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            if group_code != ErrorCode.none or topic_refused:
                codes[key] = group_code if group_code != ErrorCode.none else ErrorCode.topic_authorization_failed
            else:
                offsets[key] = committed_value(p)
    if offsets:  # each partition answered on its own, as Kafka does
        failed, code = await server.attempt(server.backend.commit_offsets, req.group_id, offsets, term,
                                            ctx.client_waits)
        for key in offsets:
            codes[key] = code if failed is None else error_code(failed[key]) if key in failed else ErrorCode.none
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes[(t.name, int(p.partition_index))]}
                                        for p in t.partitions]} for t in req.topics]}


async def offset_fetch(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    if not allows(server, ctx, Operation.DESCRIBE, ResourceType.GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "topics": []}
    if req.topics is None:  # every partition the group has offsets for
        found, _ = await server.attempt(server.backend.group_partitions, req.group_id)
        wanted: list[tuple[str, int]] = [tp for tp in found or ()
                                         if allows(server, ctx, Operation.DESCRIBE, ResourceType.TOPIC, tp[0])]
    else:
        wanted = [(t.name, int(p)) for t in req.topics for p in t.partition_indexes]
    refused = {topic for topic, _ in wanted if not allows(server, ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)}
    asked = [tp for tp in wanted if tp[0] not in refused]
    got, code = await server.attempt(server.backend.committed, req.group_id, asked)
    unstable: set[tuple[str, int]] = set()
    if getattr(req, "require_stable", False) and got is not None:
        unstable = await server.call(server.backend.pending_offsets, req.group_id, asked)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, p in wanted:
        committed = got.get((topic, p)) if got is not None else None
        if topic in refused:
            part_code = ErrorCode.topic_authorization_failed
        elif got is None:
            part_code = code
        else:
            part_code = ErrorCode.unstable_offset_commit if (topic, p) in unstable else ErrorCode.none
        by_topic.setdefault(topic, []).append({
            "partition_index": p, "committed_offset": -1 if committed is None else committed.offset,
            "committed_leader_epoch": -1 if committed is None or committed.leader_epoch is None
            else committed.leader_epoch,
            "metadata": "" if committed is None else committed.metadata, "error_code": part_code})
    # a failed read is the response's error (v2+), as Kafka's coordinator answers one: clients
    # retry it. A partition's error means that partition has no usable offset, and a client
    # rewinding to the committed offsets (librdkafka's transactions example) would start it
    # from the beginning
    return {"throttle_time": 0, "error_code": ErrorCode.none if got is not None else code,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


async def offset_delete(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    """Kafka's OffsetDelete: a partition of a topic the group's members subscribe to is
    GROUP_SUBSCRIBED_TO_TOPIC; the others' offsets are forgotten."""
    group_id = req.group_id
    empty = {"throttle_time": 0, "topics": []}
    if not allows(server, ctx, Operation.DELETE, ResourceType.GROUP, group_id):
        return {**empty, "error_code": ErrorCode.group_authorization_failed}
    if server.not_coordinator(group_id):
        return {**empty, "error_code": ErrorCode.not_coordinator}
    codes: dict[tuple[str, int], ErrorCode] = {}
    wanted = []
    for t in req.topics:
        refused = not allows(server, ctx, Operation.READ, ResourceType.TOPIC, t.name)
        busy = server.groups.subscribed(group_id, t.name)
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            if refused or busy:
                codes[key] = ErrorCode.topic_authorization_failed if refused else ErrorCode.group_subscribed_to_topic
            else:
                wanted.append(key)
    top = ErrorCode.none
    if wanted:
        failed, top = await server.attempt(server.backend.delete_offsets, group_id, wanted)
        for key in wanted:
            codes[key] = top if failed is None else error_code(failed[key]) if key in failed else ErrorCode.none
    return {"throttle_time": 0, "error_code": top, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes[(t.name, int(p.partition_index))]}
                                        for p in t.partitions]} for t in req.topics]}


APIS = (
    Api(8, "OffsetCommit", 2, 8, offset_commit),
    Api(9, "OffsetFetch", 1, 7, offset_fetch),
    Api(47, "OffsetDelete", 0, 0, offset_delete),
)

"""Group membership: JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14),
DescribeGroups (15), ListGroups (16) and DeleteGroups (42), answered by the group's coordinator
(txn_broker/kafka/groups.py) in the listener that owns the group."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, NOT_REQUESTED, Operation, ResourceType
from .base import Api, Listener, Payload, RequestContext, allows

#: a group request at a listener that is not the group's coordinator
NOT_COORDINATOR: dict[str, Any] = {
    "throttle_time": 0, "error_code": ErrorCode.not_coordinator, "generation_id": -1,
    "protocol_type": None, "protocol_name": None, "leader": "", "member_id": "", "members": [],
    "assignment": b""}
GROUP_REFUSED = {**NOT_COORDINATOR, "error_code": ErrorCode.group_authorization_failed}


def _refused_or_elsewhere(server: Listener, ctx: RequestContext, group_id: str) -> Payload | None:
    """The answer when the principal may not use the group or another listener owns it."""
    if not allows(server, ctx, Operation.READ, ResourceType.GROUP, group_id):
        return GROUP_REFUSED
    if server.not_coordinator(group_id):
        return NOT_COORDINATOR
    return None


async def join_group(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    early = _refused_or_elsewhere(server, ctx, req.group_id)
    answer = early if early is not None else \
        await server.groups.join(req, ctx.version, ctx.head.client_id or "", ctx.client_host)
    if ctx.version < 7 and answer.get("protocol_name") is None:
        # no protocol chosen (an error): null only from v7, an empty name before, as in Kafka
        answer = {**answer, "protocol_name": ""}
    return answer


async def sync_group(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    early = _refused_or_elsewhere(server, ctx, req.group_id)
    if early is not None:
        return early
    return await server.groups.sync(req)


async def heartbeat(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    early = _refused_or_elsewhere(server, ctx, req.group_id)
    if early is not None:
        return early
    return {"throttle_time": 0,
            "error_code": server.groups.heartbeat(req.group_id, req.member_id, int(req.generation_id),
                                                  getattr(req, "group_instance_id", None))}


async def leave_group(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    early = _refused_or_elsewhere(server, ctx, req.group_id)
    if early is not None:
        return early
    # v3+: members by member id, or by group.instance.id for static members (KIP-345)
    members = [(m.member_id or server.groups.static_member(req.group_id, m.group_instance_id)
                if m.group_instance_id else m.member_id, m.group_instance_id)
               for m in req.members] if hasattr(req, "members") else [(req.member_id, None)]
    codes = [server.groups.leave(req.group_id, m) for m, _ in members]
    return {"throttle_time": 0, "error_code": codes[0] if len(codes) == 1 else ErrorCode.none,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": c}
                        for (m, i), c in zip(members, codes, strict=True)]}


async def list_groups(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    """The groups with members in this listener, and those with committed offsets only
    (those the principal may describe, unless it may describe the cluster)."""
    states = set(getattr(req, "states_filter", ()) or ())
    listed = {g.group_id: (g.protocol_type or "consumer", g.state) for g in server.groups.groups.values()
              if g.members}
    committed, code = await server.attempt(server.backend.groups_with_offsets)
    for group_id in committed or ():
        listed.setdefault(group_id, ("consumer", "Empty"))
    everything = allows(server, ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    return {"throttle_time": 0, "error_code": code, "groups": [
        {"group_id": g, "protocol_type": t, "group_state": st} for g, (t, st) in sorted(listed.items())
        if (not states or st in states)
        and (everything or allows(server, ctx, Operation.DESCRIBE, ResourceType.GROUP, g))]}


async def describe_groups(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    out = []
    for group_id in req.groups:
        empty = {"group_id": group_id, "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                 "authorized_operations": NOT_REQUESTED}
        if not allows(server, ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append({**empty, "error_code": ErrorCode.group_authorization_failed})
            continue
        if server.not_coordinator(group_id):
            out.append({**empty, "error_code": ErrorCode.not_coordinator})
            continue
        group = server.groups.groups.get(group_id)
        members = [] if group is None else [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
             "client_host": m.client_host,
             "member_metadata": dict(m.protocols).get(group.protocol or "", b""),
             "member_assignment": m.assignment} for m in group.members.values()]
        out.append({"error_code": ErrorCode.none, "group_id": group_id,
                    "group_state": group.state if group is not None and group.members else "Empty",
                    "protocol_type": (group.protocol_type if group is not None else None) or "consumer",
                    "protocol_data": (group.protocol if group is not None else None) or "",
                    "members": members, "authorized_operations": server.authorizer.authorized_operations(
                        ctx.principal, ResourceType.GROUP, group_id)
                    if getattr(req, "include_authorized_operations", False) else NOT_REQUESTED})
    return {"throttle_time": 0, "groups": out}


async def delete_groups(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    """Kafka's DeleteGroups: a group with members is NON_EMPTY_GROUP; one with neither
    members nor committed offsets GROUP_ID_NOT_FOUND."""
    results = []
    for group_id in req.groups_names:
        if not allows(server, ctx, Operation.DELETE, ResourceType.GROUP, group_id):
            code = ErrorCode.group_authorization_failed
        elif server.not_coordinator(group_id):
            code = ErrorCode.not_coordinator
        elif server.groups.active(group_id):
            code = ErrorCode.non_empty_group
        else:
            _, code = await server.attempt(server.backend.delete_group, group_id)
            if code == ErrorCode.none:
                server.groups.forget(group_id)
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": results}


APIS = (
    Api(11, "JoinGroup", 0, 7, join_group),
    Api(12, "Heartbeat", 0, 4, heartbeat),
    Api(13, "LeaveGroup", 0, 4, leave_group),
    Api(14, "SyncGroup", 0, 5, sync_group),
    Api(15, "DescribeGroups", 0, 5, describe_groups),
    Api(16, "ListGroups", 0, 4, list_groups),
    Api(42, "DeleteGroups", 0, 2, delete_groups),
)

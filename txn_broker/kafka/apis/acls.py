"""Kafka's ACL APIs: DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), over the ACLs
every listener of the cluster enforces (txn_broker/kafka/acls.py). Answered
SECURITY_DISABLED by a listener without SASL, which enforces none."""

from __future__ import annotations

import contextlib
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import TxnBrokerError
from ..acls import AclAuthorizer, AclBinding, AclFilter, PatternType, Permission
from ..authorizer import CLUSTER_NAME, Operation, ResourceType
from ..errors import error_code
from .base import Api, Listener, Payload, RequestContext, allows


def _refusal(server: Listener, ctx: RequestContext, operation: Operation) -> ErrorCode | None:
    if not isinstance(server.authorizer, AclAuthorizer):
        return ErrorCode.security_disabled
    if not allows(server, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed
    return None


def _filter(f: Any, prefix: str) -> AclFilter:
    def code(enum: Any, value: int) -> Any:
        try:
            return enum(value)
        except ValueError:
            return enum(0)  # UNKNOWN: matches nothing
    return AclFilter(code(ResourceType, int(getattr(f, f"resource_type{prefix}"))),
                     getattr(f, f"resource_name{prefix}"), code(PatternType, int(f.pattern_type_filter)),
                     f.principal_filter, f.host_filter, code(Operation, int(f.operation)),
                     code(Permission, int(f.permission_type)))


def _described(acl: AclBinding) -> dict[str, Any]:
    return {"principal": acl.principal, "host": acl.host, "operation": int(acl.operation),
            "permission_type": int(acl.permission)}


async def describe_acls(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    refused = _refusal(server, ctx, Operation.DESCRIBE)
    if refused is not None:
        return {"throttle_time": 0, "error_code": refused, "error_message": refused.name, "resources": []}
    matching = _filter(req, "_filter")
    found, code = await server.attempt(server.acl_store.find, matching)
    by_resource: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for acl in found or ():
        key = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
        by_resource.setdefault(key, []).append(_described(acl))
    return {"throttle_time": 0, "error_code": code, "error_message": None if code == 0 else code.name,
            "resources": [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                          for (t, n, p), acls in sorted(by_resource.items())]}


async def create_acls(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    refused = _refusal(server, ctx, Operation.ALTER)
    results = []
    for c in req.creations:
        if refused is not None:
            results.append({"error_code": refused, "error_message": refused.name})
            continue
        try:
            acl = AclBinding(ResourceType(int(c.resource_type)), c.resource_name,
                             PatternType(int(c.resource_pattern_type)), c.principal, c.host,
                             Operation(int(c.operation)), Permission(int(c.permission_type))).check()
        except (ValueError, TxnBrokerError) as error:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": str(error)})
            continue
        _, code = await server.attempt(server.acl_store.add, [acl])
        results.append({"error_code": code, "error_message": None if code == 0 else code.name})
    with contextlib.suppress(TxnBrokerError):  # else read again by the next heartbeat
        await server.refresh_acls()
    return {"throttle_time": 0, "results": results}


async def delete_acls(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    refused = _refusal(server, ctx, Operation.ALTER)
    results = []
    for f in req.filters:
        if refused is not None:
            results.append({"error_code": refused, "error_message": refused.name, "matching_acls": []})
            continue
        try:
            deleted = await server.call(server.acl_store.remove, _filter(f, "_filter"))
        except TxnBrokerError as error:
            results.append({"error_code": error_code(error), "error_message": str(error), "matching_acls": []})
            continue
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": int(a.resource_type),
             "resource_name": a.resource_name, "pattern_type": int(a.pattern_type), **_described(a)}
            for a in deleted]})
    with contextlib.suppress(TxnBrokerError):  # else read again by the next heartbeat
        await server.refresh_acls()
    return {"throttle_time": 0, "filter_results": results}


APIS = (
    Api(29, "DescribeAcls", 1, 3, describe_acls),
    Api(30, "CreateAcls", 1, 3, create_acls),
    Api(31, "DeleteAcls", 1, 3, delete_acls),
)

"""Metadata (3) and FindCoordinator (10): the listeners of the cluster, the topics, who
leads each partition and who coordinates a group."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, NOT_REQUESTED, Operation, ResourceType
from ..backend import Node
from ..codec import NULL_UUID
from .base import Api, Listener, Payload, RequestContext, allows

CLUSTER_ID = "txn-broker"


def node_entry(node: Node) -> dict[str, Any]:
    return {"node_id": node.node_id, "host": node.host, "port": node.port, "rack": None}


async def metadata(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    wanted = None if req.topics is None or (ctx.version == 0 and not req.topics) else [t.name for t in req.topics]
    principal = ctx.principal
    topics = []
    if wanted is None:  # every topic the principal may describe; the others are not named
        infos = await server.call(server.backend.list_topics)
        found: list[tuple[str, Any, ErrorCode]] = [
            (i.name, i, ErrorCode.none) for i in infos if allows(server, ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                                                 i.name)]
    else:
        found = []
        for name in wanted:
            if not allows(server, ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
                found.append((name, None, ErrorCode.topic_authorization_failed))
                continue
            info, code = await server.attempt(server.backend.topic, name)
            if code == ErrorCode.unknown_topic_or_partition and _may_auto_create(server, ctx, req, name):
                info, code = await server.attempt(server.backend.create_topic, name, server.auto_create_topics, {})
                if code == ErrorCode.topic_already_exists:  # created meanwhile by another client
                    info, code = await server.attempt(server.backend.topic, name)
            found.append((name, info, code))
    with_topic_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    for name, info, code in found:
        # every listener serves every partition (the data is shared); leaders are spread
        partitions = [] if info is None else [
            {"error_code": 0, "partition_index": p, "leader_id": leader, "leader_epoch": 0,
             "replica_nodes": [leader], "isr_nodes": [leader], "offline_replicas": []}
            for p in range(info.partitions)
            for leader in [server.leader(name, p)]]
        ops = server.authorizer.authorized_operations(principal, ResourceType.TOPIC, name) \
            if with_topic_ops and info is not None else NOT_REQUESTED
        topics.append({"error_code": code, "name": name, "is_internal": False, "partitions": partitions,
                       "topic_id": NULL_UUID if info is None else info.topic_id,
                       "topic_authorized_operations": ops})
    nodes = await server.refresh_nodes()
    cluster_ops = server.authorizer.authorized_operations(principal, ResourceType.CLUSTER, CLUSTER_NAME) \
        if getattr(req, "include_cluster_authorized_operations", False) else NOT_REQUESTED
    return {"throttle_time": 0, "brokers": [node_entry(n) for n in nodes], "cluster_id": CLUSTER_ID,
            "controller_id": nodes[0].node_id, "topics": topics, "cluster_authorized_operations": cluster_ops}


def _may_auto_create(server: Listener, ctx: RequestContext, req: Any, name: str) -> bool:
    """Kafka's auto.create.topics.enable: the listener's flag, the request's
    allow_auto_topic_creation (v4+), and CREATE on the cluster or the topic."""
    return bool(server.auto_create_topics) and bool(getattr(req, "allow_auto_topic_creation", True)) and (
        allows(server, ctx, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
        or allows(server, ctx, Operation.CREATE, ResourceType.TOPIC, name))


async def find_coordinator(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    # a group's membership lives in one listener, named from the cluster read afresh (or,
    # while none may be named, COORDINATOR_NOT_AVAILABLE: the client asks again); any
    # listener coordinates transactions
    key_type = int(getattr(req, "key_type", 0))
    resource = ResourceType.GROUP if key_type == 0 else ResourceType.TRANSACTIONAL_ID
    none = {"throttle_time": 0, "error_message": None, "node_id": -1, "host": "", "port": -1}
    if not allows(server, ctx, Operation.DESCRIBE, resource, req.key):
        code = ErrorCode.group_authorization_failed if key_type == 0 else \
            ErrorCode.transactional_id_authorization_failed
        return {**none, "error_code": code}
    if key_type == 0:
        await server.refresh_nodes()
        found = server.coordinator(req.key)
        if found is None:
            return {**none, "error_code": ErrorCode.coordinator_not_available}
        node = node_entry(found)
    else:
        node = node_entry(server.self_node())
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
            "node_id": node["node_id"], "host": node["host"], "port": node["port"]}


APIS = (
    Api(3, "Metadata", 0, 12, metadata),
    Api(10, "FindCoordinator", 0, 3, find_coordinator),
)

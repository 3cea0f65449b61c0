"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..authorizer import CLUSTER_NAME, Operation, ResourceType
from ..codec import NULL_UUID
from .base import Api, Listener, Payload, RequestContext, allows


async def create_topics(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    may_create_any = allows(server, ctx, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
    results = []
    for t in req.topics:
        out = {"name": t.name, "num_partitions": -1, "replication_factor": 1, "configs": [], "topic_id": NULL_UUID}
        if not may_create_any and not allows(server, ctx, Operation.CREATE, ResourceType.TOPIC, t.name):
            results.append({**out, "error_code": ErrorCode.topic_authorization_failed, "error_message": None})
            continue
        configs = {c.name: c.value for c in t.configs}
        partitions = int(t.num_partitions)
        if partitions == -1 and t.assignments:  # a replica assignment names every partition
            partitions = len(t.assignments)
        info, code = await server.attempt(server.backend.create_topic, t.name, partitions, configs,
                                          bool(getattr(req, "validate_only", False)))
        results.append({**out, "error_code": code, "error_message": None if code == 0 else code.name,
                        "num_partitions": info.partitions if info else -1,
                        "topic_id": info.topic_id if info else NULL_UUID})
    return {"throttle_time": 0, "topics": results}


async def delete_topics(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    results = []
    for name in req.topic_names:
        if not allows(server, ctx, Operation.DELETE, ResourceType.TOPIC, name):
            results.append({"name": name, "error_code": ErrorCode.topic_authorization_failed})
            continue
        _, code = await server.attempt(server.backend.delete_topic, name)
        results.append({"name": name, "error_code": code})
    return {"throttle_time": 0, "responses": results}


async def create_partitions(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    """Kafka's CreatePartitions (``kafka-topics --alter --partitions``): a topic grows through
    ``Broker.alter_topic``; replica assignments are ignored (every listener serves every
    partition)."""
    results = []
    for t in req.topics:
        if not allows(server, ctx, Operation.ALTER, ResourceType.TOPIC, t.name):
            results.append({"name": t.name, "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": None})
            continue
        _, code = await server.attempt(server.backend.create_partitions, t.name, int(t.count),
                                       bool(req.validate_only), f"{ctx.principal.name}@{ctx.principal.host} (kafka)")
        results.append({"name": t.name, "error_code": code, "error_message": None if code == 0 else code.name})
    return {"throttle_time": 0, "results": results}


APIS = (
    Api(19, "CreateTopics", 2, 7, create_topics),
    Api(20, "DeleteTopics", 1, 5, delete_topics),
    Api(37, "CreatePartitions", 0, 3, create_partitions),
)

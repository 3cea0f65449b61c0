"""DescribeProducers (61): the producers writing to a partition (those the broker holds
sequence state for) and the first offset of the transaction each has open there."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..authorizer import Operation, ResourceType
from .base import Api, Listener, Payload, RequestContext, allows


async def describe_producers(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    topics = []
    for t in req.topics:
        refused = not allows(server, ctx, Operation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partition_indexes:
            if refused:
                got, code = None, ErrorCode.topic_authorization_failed
            else:
                got, code = await server.attempt(server.backend.producers, t.name, int(p))
            parts.append({"partition_index": p, "error_code": code,
                          "error_message": None if code == ErrorCode.none else code.name,
                          "active_producers": [
                              {"producer_id": i.producer_id, "producer_epoch": i.epoch,
                               "last_sequence": i.last_sequence, "last_timestamp": i.last_timestamp_ms,
                               "coordinator_epoch": 0, "current_txn_start_offset": i.txn_start_offset}
                              for i in got or ()]})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


APIS = (Api(61, "DescribeProducers", 0, 0, describe_producers),)

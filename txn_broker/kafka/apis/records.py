"""DeleteRecords (21): each partition's log start offset moved up to the given offset (-1:
the high watermark), as ``kafka-delete-records`` and ``AdminClient.delete_records`` ask
(:meth:`txn_broker.Broker.delete_records`). Each partition answers on its own: its new low
watermark, or OFFSET_OUT_OF_RANGE past its high watermark; DELETE on the topic is needed
(TOPIC_AUTHORIZATION_FAILED otherwise)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..authorizer import Operation, ResourceType
from .base import Api, Listener, Payload, RequestContext, allows


async def delete_records(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    topics = []
    for t in req.topics:
        refused = not allows(server, ctx, Operation.DELETE, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partitions:
            if refused:
                low, code = None, ErrorCode.topic_authorization_failed
            else:
                low, code = await server.attempt(server.backend.delete_records, t.name, int(p.partition_index),
                                                 int(p.offset))
            parts.append({"partition_index": p.partition_index, "error_code": code,
                          "low_watermark": -1 if low is None else low})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


APIS = (Api(21, "DeleteRecords", 0, 2, delete_records),)

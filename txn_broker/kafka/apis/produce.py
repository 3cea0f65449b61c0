"""Produce (0): each partition's record batch stored as one segment (RecordBatch v2 only:
Kafka 0.11+ clients)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import TxnBrokerError
from ..authorizer import Operation, ResourceType
from ..backend import PreparedProduce
from ..errors import for_produce
from ..recordbatch import RecordFormatError, decode_batches
from .base import Api, Listener, Payload, RequestContext, allows


async def produce(server: Listener, ctx: RequestContext, req: Any) -> Payload | None:
    """``ctx.ready``: batches already prepared (the server's read-ahead), taken out of it as
    they are committed."""
    tid = req.transactional_id
    tid_refused = tid is not None and not allows(server, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)
    responses = []
    for t in req.topic_data:
        parts = []
        topic_refused = not allows(server, ctx, Operation.WRITE, ResourceType.TOPIC, t.name)
        for p in t.partition_data:
            prepared = ctx.ready.pop((t.name, int(p.index)), None)
            if tid_refused or topic_refused:
                code = ErrorCode.transactional_id_authorization_failed if tid_refused else \
                    ErrorCode.topic_authorization_failed
                parts.append({**_empty(int(p.index)), "error_code": code})
                if prepared is not None:
                    await server.call(server.backend.discard, prepared)
                continue
            parts.append(await _produce_partition(server, t.name, int(p.index), p.records, tid, prepared))
        responses.append({"name": t.name, "partition_responses": parts})
    if req.acks == 0:
        return None
    return {"responses": responses, "throttle_time": 0}


def _empty(partition: int) -> dict[str, Any]:
    return {"index": partition, "base_offset": -1, "log_start_offset": -1, "log_append_time": None,
            "record_errors": [], "error_message": None}


async def _produce_partition(server: Listener, topic: str, partition: int, records: bytes | None,
                             transactional_id: str | None, prepared: PreparedProduce | None) -> dict[str, Any]:
    out = _empty(partition)
    try:
        if prepared is not None:
            result = await server.call(server.backend.commit_produce, prepared, transactional_id)
        else:
            try:
                batches = decode_batches(records)
            except RecordFormatError as error:
                return {**out, "error_code": ErrorCode.corrupt_message, "error_message": str(error)}
            if len(batches) != 1:
                # Kafka accepts one batch per partition per request from idempotent clients
                return {**out, "error_code": ErrorCode.invalid_record,
                        "error_message": f"{len(batches)} record batches; one per partition is expected"}
            result = await server.call(server.backend.produce, topic, partition, batches[0], transactional_id)
    except TxnBrokerError as error:
        return {**out, "error_code": for_produce(error), "error_message": str(error)[:500]}
    return {**out, "error_code": ErrorCode.none, "base_offset": result.base_offset,
            "log_start_offset": result.log_start_offset}


APIS = (Api(0, "Produce", 3, 9, produce),)

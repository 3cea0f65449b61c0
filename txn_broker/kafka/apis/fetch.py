"""Fetch (1), record batches of the partitions asked for, waiting up to the request's
max_wait (capped at MAX_FETCH_WAIT_S) for data, with fetch sessions (KIP-227,
:mod:`txn_broker.kafka.fetch_sessions`); and ListOffsets (2)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from ..authorizer import Operation, ResourceType
from ..fetch_sessions import FINAL_EPOCH, NO_SESSION, FetchPlan, PartitionFetch
from .base import Api, Listener, Payload, RequestContext, allows

#: the longest a Fetch waits for data (the request's max_wait is honoured up to this)
MAX_FETCH_WAIT_S = 1.0


def _plan(server: Listener, ctx: RequestContext, req: Any) -> FetchPlan:
    """The request's partitions, through its fetch session (v7+; fetch_sessions.py)."""
    wanted = [PartitionFetch(t.topic, int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes))
              for t in req.topics for p in t.partitions]
    forgotten = [(t.topic, int(p)) for t in getattr(req, "forgotten_topics_data", ()) for p in t.partitions]
    return server.fetch_sessions.plan(int(getattr(req, "session_id", NO_SESSION)),
                                      int(getattr(req, "session_epoch", FINAL_EPOCH)), ctx.principal.name,
                                      wanted, forgotten)


async def fetch(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    isolation = int(getattr(req, "isolation_level", 0))
    max_wait = req.max_wait.total_seconds() if hasattr(req.max_wait, "total_seconds") else req.max_wait / 1000
    deadline = time.monotonic() + min(max(max_wait, 0.0), MAX_FETCH_WAIT_S)
    budget = int(getattr(req, "max_bytes", 50 * 1024 * 1024))
    plan = _plan(server, ctx, req)
    if plan.error != ErrorCode.none:
        return {"throttle_time": 0, "error_code": plan.error, "session_id": NO_SESSION, "responses": []}
    topics = {p.topic for p in plan.partitions}
    refused = {t for t in topics if not allows(server, ctx, Operation.READ, ResourceType.TOPIC, t)}
    delay = 0.01
    while True:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        total, answered, errors = 0, 0, False
        for p in plan.partitions:
            part: dict[str, Any] = {"partition_index": p.partition, "error_code": ErrorCode.none,
                                    "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                    "aborted_transactions": [] if isolation == 1 else None,
                                    "preferred_read_replica": -1, "records": b""}
            size = 0
            if p.topic in refused:
                part["error_code"] = ErrorCode.topic_authorization_failed
            elif total >= budget:  # full: only the response's first batch may pass max_bytes (KIP-74)
                bounds, code = await server.attempt(server.backend.offsets, p.topic, p.partition)
                part["error_code"] = code
                if bounds is not None:
                    part.update(log_start_offset=bounds[0], high_watermark=bounds[1], last_stable_offset=bounds[2])
            else:
                limit = max(min(p.max_bytes, budget - total), 1)
                got, code = await server.attempt(server.backend.fetch, p.topic, p.partition, p.fetch_offset,
                                                 limit, isolation, total == 0)
                part["error_code"] = code
                if got is not None:
                    part.update(high_watermark=got.high_watermark, last_stable_offset=got.last_stable_offset,
                                log_start_offset=got.log_start_offset, records=got.records)
                    size = got.size
                elif code == ErrorCode.offset_out_of_range:
                    bounds, _ = await server.attempt(server.backend.offsets, p.topic, p.partition)
                    if bounds is not None:
                        part.update(log_start_offset=bounds[0], high_watermark=bounds[1],
                                    last_stable_offset=bounds[2])
            total += size
            errors = errors or part["error_code"] != ErrorCode.none
            if plan.must_answer(p.topic, p.partition, part["error_code"], size, part["high_watermark"],
                                part["last_stable_offset"], part["log_start_offset"]):
                by_topic.setdefault(p.topic, []).append(part)
                answered += 1
        # an incremental fetch answers as soon as any partition has news, a full one with data
        if total or errors or (plan.incremental and answered) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 0.1)
    responses = [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": plan.session_id, "responses": responses}


async def list_offsets(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    isolation = int(getattr(req, "isolation_level", 0))
    topics = []
    for t in req.topics:
        refused = not allows(server, ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partitions:
            if refused:
                got, code = None, ErrorCode.topic_authorization_failed
            else:
                got, code = await server.attempt(server.backend.list_offset, t.name, int(p.partition_index),
                                                 int(p.timestamp), isolation)
            offset, ts = got if got is not None else (-1, -1)
            parts.append({"partition_index": p.partition_index, "error_code": code, "timestamp": ts,
                          "offset": offset, "leader_epoch": 0})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


APIS = (
    Api(1, "Fetch", 4, 12, fetch),
    Api(2, "ListOffsets", 1, 7, list_offsets),
)
#: the key whose responses are written without copying their records (server.py)
FETCH_KEY = 1

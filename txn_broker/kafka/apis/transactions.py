"""The transaction coordinator's APIs: InitProducerId (22), AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28), DescribeTransactions (65) and
ListTransactions (66)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...models import OffsetAndMetadata
from ...states import is_open
from ..authorizer import CLUSTER_NAME, Operation, ResourceType
from ..backend import ListenerTerm
from ..errors import error_code
from .base import Api, Listener, Payload, RequestContext, allows
from .offsets import committed_value

TID_REFUSED = ErrorCode.transactional_id_authorization_failed


def _may_write(server: Listener, ctx: RequestContext, transactional_id: str) -> bool:
    return allows(server, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def init_producer_id(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    tid = req.transactional_id
    # an idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679)
    refused = not _may_write(server, ctx, tid) if tid is not None else not (
        allows(server, ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
        or server.authorizer.allows_any(ctx.principal, Operation.WRITE, ResourceType.TOPIC))
    if refused:
        code = TID_REFUSED if tid is not None else ErrorCode.cluster_authorization_failed
        return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
    timeout = req.transaction_timeout
    timeout_ms = int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else int(timeout)
    got, code = await server.attempt(server.backend.init_producer_id, tid, timeout_ms,
                                     int(getattr(req, "producer_id", -1)), int(getattr(req, "producer_epoch", -1)),
                                     ctx.client_waits)
    pid, epoch = got if got is not None else (-1, -1)
    return {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}


async def add_partitions_to_txn(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    tid = req.v3_and_below_transactional_id
    pairs = [(t.name, int(p)) for t in req.v3_and_below_topics for p in t.partitions]
    codes: dict[str, ErrorCode] = {}
    if not _may_write(server, ctx, tid):
        codes = {t.name: TID_REFUSED for t in req.v3_and_below_topics}
    else:
        refused = {t.name for t in req.v3_and_below_topics
                   if not allows(server, ctx, Operation.WRITE, ResourceType.TOPIC, t.name)}
        if refused:  # Kafka: the refused topics fail, the others are not added (OPERATION_NOT_ATTEMPTED)
            codes = {t.name: ErrorCode.topic_authorization_failed if t.name in refused
                     else ErrorCode.operation_not_attempted for t in req.v3_and_below_topics}
        else:
            _, code = await server.attempt(server.backend.add_partitions, tid, int(req.v3_and_below_producer_id),
                                           int(req.v3_and_below_producer_epoch), pairs, ctx.client_waits)
            codes = {t.name: code for t in req.v3_and_below_topics}
    topics = [{"name": t.name, "results_by_partition": [
        {"partition_index": p, "partition_error_code": codes[t.name]} for p in t.partitions]}
        for t in req.v3_and_below_topics]
    return {"throttle_time": 0, "results_by_topic_v3_and_below": topics}


async def add_offsets_to_txn(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    if not _may_write(server, ctx, req.transactional_id):
        return {"throttle_time": 0, "error_code": TID_REFUSED}
    if not allows(server, ctx, Operation.READ, ResourceType.GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    _, code = await server.attempt(server.backend.add_offsets, req.transactional_id, int(req.producer_id),
                                   int(req.producer_epoch), req.group_id, ctx.client_waits)
    return {"throttle_time": 0, "error_code": code}


def _member_refused(server: Listener, req: Any) -> tuple[ErrorCode | None, ListenerTerm | None]:
    """A TxnOffsetCommit sent with a group member's metadata (v3+) is checked by the group's
    coordinator against the group's members and generation (KIP-447): the code refusing it
    (None: accepted), and the coordinator's term the check holds in (the offsets are staged
    only if that term still holds then)."""
    generation = int(getattr(req, "generation_id", -1))
    member_id = getattr(req, "member_id", "") or ""
    instance_id = getattr(req, "group_instance_id", None)
    if generation < 0 and not member_id and not instance_id:
        return None, None
    term = server.coordinator_term(req.group_id)
    if term is None:
        return ErrorCode.not_coordinator, None
    code = server.groups.check_txn_member(req.group_id, member_id, generation, instance_id)
    return (None if code == ErrorCode.none else code), term


async def txn_offset_commit(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    codes: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    refused = TID_REFUSED if not _may_write(server, ctx, req.transactional_id) else (
        ErrorCode.group_authorization_failed if not allows(server, ctx, Operation.READ, ResourceType.GROUP,
                                                           req.group_id) else None)
    term = None
    if refused is None:
        refused, term = _member_refused(server, req)
    for t in req.topics:
        topic_refused = not allows(server, ctx, Operation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            if refused is not None or topic_refused:
                codes[key] = refused if refused is not None else ErrorCode.topic_authorization_failed
                continue
            offsets[key] = committed_value(p)
    if offsets:
        failed, code = await server.attempt(server.backend.txn_offset_commit, req.transactional_id,
                                            int(req.producer_id), int(req.producer_epoch), req.group_id, offsets,
                                            term, ctx.client_waits)
        for key in offsets:
            codes[key] = code if failed is None else error_code(failed[key]) if key in failed else ErrorCode.none
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes[(t.name, int(p.partition_index))]}
                                        for p in t.partitions]} for t in req.topics]}


async def end_txn(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    if not _may_write(server, ctx, req.transactional_id):
        return {"throttle_time": 0, "error_code": TID_REFUSED}
    _, code = await server.attempt(server.backend.end_txn, req.transactional_id, int(req.producer_id),
                                   int(req.producer_epoch), bool(req.committed), ctx.client_waits)
    return {"throttle_time": 0, "error_code": code}


async def list_transactions(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    got, code = await server.attempt(server.backend.list_transactions, list(req.state_filters or ()))
    pids = set(req.producer_id_filters or ())
    # Kafka lists only the transactional ids the principal may describe
    states = [{"transactional_id": s.transactional_id, "producer_id": s.producer_id,
               "transaction_state": s.state} for s in got or ()
              if (not pids or s.producer_id in pids)
              and allows(server, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, s.transactional_id)]
    return {"throttle_time": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": states}


async def describe_transactions(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    out = []
    for tid in req.transactional_ids:
        if allows(server, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            d, code = await server.attempt(server.backend.describe_transaction, tid)
        else:
            d, code = None, TID_REFUSED
        if d is None:
            out.append({"error_code": code, "transactional_id": tid, "transaction_state": "",
                        "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                        "producer_epoch": -1, "topics": []})
            continue
        by_topic: dict[str, list[int]] = {}
        for p in d.partitions if is_open(d.state) else ():
            if allows(server, ctx, Operation.DESCRIBE, ResourceType.TOPIC, p.topic):
                by_topic.setdefault(p.topic, []).append(p.partition)
        out.append({"error_code": 0, "transactional_id": tid, "transaction_state": d.state,
                    "transaction_timeout": d.timeout_ms,
                    "transaction_start_time": d.start_ms if d.start_ms is not None else -1,
                    "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]})
    return {"throttle_time": 0, "transaction_states": out}


APIS = (
    Api(22, "InitProducerId", 0, 4, init_producer_id),
    Api(24, "AddPartitionsToTxn", 0, 3, add_partitions_to_txn),
    Api(25, "AddOffsetsToTxn", 0, 3, add_offsets_to_txn),
    Api(26, "EndTxn", 0, 3, end_txn),
    Api(28, "TxnOffsetCommit", 0, 3, txn_offset_commit),
    Api(65, "DescribeTransactions", 0, 0, describe_transactions),
    Api(66, "ListTransactions", 0, 0, list_transactions),
)
#: the first version of each transactional API that may answer PRODUCER_FENCED (KIP-588);
#: older versions get INVALID_PRODUCER_EPOCH, which their clients know, as from Kafka
PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}

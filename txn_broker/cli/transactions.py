"""``txn-broker transactions list | describe | abort | find-hanging | abort-expired | expire-ids``
(Kafka's kafka-transactions, plus the coordinator's sweeps)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import HangingTransaction, SweepAction, TransactionDescription, TransactionSummary, TxnState
from .common import Context, non_negative_int, plain
from .output import human_bytes, human_duration, iso_ms


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    txns = commands.add_parser("transactions", help="inspect and administer transactions")
    actions = txns.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="transactional ids and their current state")
    listing.add_argument("--state", action="append", choices=[s.value for s in TxnState], metavar="STATE",
                         help="only these states (repeatable): " + ", ".join(s.value for s in TxnState))
    listing.set_defaults(handler=list_transactions)

    describe = actions.add_parser("describe", parents=[common],
                                  help="a transactional id: current transaction and state timeline")
    describe.add_argument("transactional_id", metavar="ID")
    describe.set_defaults(handler=describe_transaction)

    abort = actions.add_parser("abort", parents=[common],
                               help="abort the open transaction of ID now, fencing its producer")
    abort.add_argument("transactional_id", metavar="ID")
    abort.set_defaults(handler=abort_transaction)

    hanging = actions.add_parser("find-hanging", parents=[common],
                                 help="open transactions holding back a partition's last stable offset")
    hanging.add_argument("--older-than-ms", type=non_negative_int, metavar="N",
                         help="open longer than N ms (default: longer than their own timeout)")
    hanging.set_defaults(handler=find_hanging)

    expired = actions.add_parser("abort-expired", parents=[common],
                                 help="abort transactions past their timeout; finish decided ones")
    expired.set_defaults(handler=abort_expired)

    expire = actions.add_parser("expire-ids", parents=[common],
                                help="remove transactional ids idle past transactional_id_expiration_ms")
    expire.set_defaults(handler=expire_ids)


def action_json(action: SweepAction) -> dict[str, Any]:
    return {"transactional_id": action.transactional_id, "action": action.action,
            "producer_id": action.producer_id, "producer_epoch": action.epoch, "txn_id": action.txn_id}


def summary_json(s: TransactionSummary) -> dict[str, Any]:
    return {"transactional_id": s.transactional_id, "state": s.state, "producer_id": s.producer_id,
            "producer_epoch": s.producer_epoch, "txn_id": s.txn_id, "txn_start_ms": s.txn_start_ms,
            "age_ms": s.age_ms, "timeout_ms": s.timeout_ms, "hanging": s.is_hanging,
            "last_update_ms": s.last_update_ms, "partition_count": s.partition_count,
            "record_count": s.record_count, "size_bytes": s.size_bytes}


def list_transactions(ctx: Context, args: argparse.Namespace) -> int:
    summaries = ctx.broker.list_transactions(args.state)
    if ctx.json:
        ctx.out.json({"transactions": [summary_json(s) for s in summaries]})
        return 0
    ctx.out.table(
        ["TRANSACTIONAL_ID", "STATE", "PRODUCER_ID", "EPOCH", "TXN_ID", "AGE", "TIMEOUT", "PARTITIONS", "RECORDS",
         "BYTES"],
        [[s.transactional_id, s.state + (" (hanging)" if s.is_hanging else ""), s.producer_id, s.producer_epoch,
          s.txn_id, human_duration(s.age_ms), human_duration(s.timeout_ms), s.partition_count, s.record_count,
          human_bytes(s.size_bytes)] for s in summaries],
        empty=ctx.nothing_found("No transactional ids" + (f" in state {', '.join(args.state)}" if args.state else "")))
    return 0


def describe_json(d: TransactionDescription) -> dict[str, Any]:
    document: dict[str, Any] = plain(d)
    return document


def describe_transaction(ctx: Context, args: argparse.Namespace) -> int:
    d = ctx.broker.describe_transaction(args.transactional_id)
    if ctx.json:
        ctx.out.json(describe_json(d))
        return 0
    out = ctx.out
    out.fields([
        ("Transactional id", d.transactional_id),
        ("State", d.state),
        ("Producer id", d.producer_id),
        ("Epoch", d.producer_epoch),
        ("Timeout", human_duration(d.timeout_ms)),
        ("Transaction", d.txn_id),
        ("Started", iso_ms(d.start_ms)),
        ("Last update", iso_ms(d.last_update_ms)),
    ])
    if d.partitions:
        out.line()
        out.line("Partitions of the transaction:")
        out.table(["TOPIC", "PARTITION", "FIRST_OFFSET", "LAST_OFFSET", "RECORDS", "BYTES", "MARKER",
                   "MARKER_OFFSET"],
                  [[p.topic, p.partition, p.first_offset, p.last_offset, p.record_count, human_bytes(p.size_bytes),
                    p.marker or "open", p.marker_offset] for p in d.partitions])
    if d.pending_offsets:
        out.line()
        out.line("Group offsets sent in the transaction:")
        out.table(["GROUP", "TOPIC", "PARTITION", "OFFSET"],
                  [[o["group_id"], o["topic"], o["partition_no"], o["committed_offset"]] for o in d.pending_offsets])
    out.line()
    out.line("Timeline:")
    first = d.history[0].at_ms if d.history else 0
    out.table(["AT", "+ELAPSED", "FROM", "", "TO", "EPOCH", "TXN_ID", "REASON"],
              [[iso_ms(h.at_ms), "+" + human_duration(h.at_ms - first), h.from_state, "->", h.to_state,
                h.producer_epoch, h.txn_id, h.reason] for h in d.history],
              empty="(no state changes recorded)")
    return 0


def abort_transaction(ctx: Context, args: argparse.Namespace) -> int:
    action = ctx.broker.abort_transaction(args.transactional_id)
    if ctx.json:
        ctx.out.json(action_json(action))
    elif action.action == "aborted":
        ctx.out.line(f"Aborted transaction {action.txn_id} of {action.transactional_id!r}; its producer is "
                     f"fenced (the id is now at producer id {action.producer_id}, epoch {action.epoch}).")
    else:
        ctx.out.line(f"Transaction {action.txn_id} of {action.transactional_id!r} was already decided: "
                     f"{action.action}.")
    return 0


def hanging_json(h: HangingTransaction) -> dict[str, Any]:
    return {"transactional_id": h.transactional_id, "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch, "txn_id": h.txn_id, "start_ms": h.start_ms,
            "timeout_ms": h.timeout_ms, "age_ms": h.age_ms,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "first_offset": h.first_offsets[tp]}
                           for tp in h.partitions]}


def find_hanging(ctx: Context, args: argparse.Namespace) -> int:
    hanging = ctx.broker.find_hanging_transactions(args.older_than_ms)
    if ctx.json:
        ctx.out.json({"hanging": [hanging_json(h) for h in hanging]})
        return 0
    ctx.out.table(["TRANSACTIONAL_ID", "PRODUCER_ID", "EPOCH", "TXN_ID", "AGE", "TIMEOUT", "TOPIC", "PARTITION",
                   "FIRST_OFFSET"],
                  [[h.transactional_id, h.producer_id, h.producer_epoch, h.txn_id, human_duration(h.age_ms),
                    human_duration(h.timeout_ms), tp.topic, tp.partition, h.first_offsets[tp]]
                   for h in hanging for tp in h.partitions],
                  empty=ctx.nothing_found("No hanging transactions."))
    return 0


def _actions_table(ctx: Context, actions: list[SweepAction], empty: str) -> None:
    ctx.out.table(["TRANSACTIONAL_ID", "ACTION", "TXN_ID", "PRODUCER_ID", "EPOCH"],
                  [[a.transactional_id, a.action, a.txn_id, a.producer_id, a.epoch] for a in actions],
                  empty=ctx.nothing_found(empty))


def abort_expired(ctx: Context, args: argparse.Namespace) -> int:
    broker = ctx.broker
    aborted = broker.abort_expired_transactions()
    completed = broker.complete_prepared_transactions()
    if ctx.json:
        ctx.out.json({"aborted": [action_json(a) for a in aborted],
                      "completed": [action_json(a) for a in completed]})
        return 0
    _actions_table(ctx, aborted + completed, "No expired or decided-but-unfinished transactions.")
    return 0


def expire_ids(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.broker.expire_transactional_ids()
    expired: list[SweepAction] = result["transactional_ids"]
    removed = int(result["producer_states_removed"])
    if ctx.json:
        ctx.out.json({"expired": [action_json(a) for a in expired], "producer_states_removed": removed})
        return 0
    _actions_table(ctx, expired, "No transactional ids to expire.")
    ctx.out.line(f"Removed the sequence state of {removed} idle producer partition"
                 f"{'s' if removed != 1 else ''}.")
    return 0

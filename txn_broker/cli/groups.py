"""``txn-broker groups list | describe | reset-offsets``.

Lag is measured against the last stable offset: what a read_committed consumer of the
group can still read. ``--to-latest`` resets to the last stable offset too (not the high
watermark, which would skip the records of transactions still open and committed later).
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import GroupDescription, TopicPartition
from ..errors import OffsetOutOfRangeError
from .common import Context, iso_datetime_ms, non_negative_int
from .output import iso_ms


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    groups = commands.add_parser("groups", help="consumer groups: list, describe, reset offsets")
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="groups with committed offsets, and their lag")
    listing.set_defaults(handler=list_groups)

    describe = actions.add_parser("describe", parents=[common],
                                  help="committed offset, last stable offset and lag per partition")
    describe.add_argument("group", metavar="G")
    describe.set_defaults(handler=describe_group)

    reset = actions.add_parser("reset-offsets", parents=[common],
                               help="set a group's committed offsets on every partition of a topic")
    reset.add_argument("group", metavar="G")
    reset.add_argument("--topic", required=True, metavar="T")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the last stable offset")
    target.add_argument("--to-offset", type=non_negative_int, metavar="N", help="offset N on every partition")
    target.add_argument("--to-datetime", type=iso_datetime_ms, metavar="ISO",
                        help="the first offset whose record is at or after this time (ISO 8601, e.g. "
                             "2026-01-31T00:00:00Z; no offset means UTC): reprocess from there")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets, change nothing")
    reset.set_defaults(handler=reset_offsets)


def group_json(desc: GroupDescription) -> dict[str, Any]:
    return {
        "group_id": desc.group_id,
        "lag": desc.lag,
        "partitions": [
            {"topic": p.topic, "partition": p.partition, "committed_offset": p.committed_offset,
             "log_start_offset": p.log_start_offset, "last_stable_offset": p.last_stable_offset,
             "high_watermark": p.high_watermark, "lag": p.lag, "commit_ms": p.commit_ms}
            for p in desc.partitions
        ],
    }


def list_groups(ctx: Context, args: argparse.Namespace) -> int:
    broker = ctx.broker
    descriptions = [broker.describe_group(g) for g in broker.list_groups()]
    rows: list[dict[str, Any]] = [{"group_id": d.group_id, "topics": sorted({p.topic for p in d.partitions}),
             "partition_count": len(d.partitions), "lag": d.lag} for d in descriptions]
    if ctx.json:
        ctx.out.json({"groups": rows})
    else:
        ctx.out.table(["GROUP", "TOPICS", "PARTITIONS", "LAG"],
                      [[r["group_id"], ",".join(r["topics"]), r["partition_count"], r["lag"]] for r in rows],
                      empty="No consumer groups.")
    return 0


def describe_group(ctx: Context, args: argparse.Namespace) -> int:
    desc = ctx.broker.describe_group(args.group)
    if ctx.json:
        ctx.out.json(group_json(desc))
        return 0
    ctx.out.line(f"Group {desc.group_id}: lag {desc.lag:,}")
    ctx.out.table(["TOPIC", "PARTITION", "COMMITTED_OFFSET", "LOG_START_OFFSET", "LAST_STABLE_OFFSET",
                   "HIGH_WATERMARK", "LAG", "COMMITTED_AT"],
                  [[p.topic, p.partition, p.committed_offset, p.log_start_offset, p.last_stable_offset,
                    p.high_watermark, p.lag, iso_ms(p.commit_ms)] for p in desc.partitions])
    return 0


def reset_offsets(ctx: Context, args: argparse.Namespace) -> int:
    broker = ctx.broker
    topic = broker.describe_topic(args.topic)
    tps = [TopicPartition(topic.name, p.partition) for p in topic.partitions]
    before = broker.committed_offsets(args.group, tps)
    new: dict[TopicPartition, int] = {}
    at_time = broker.offsets_for_times(tps, args.to_datetime) if args.to_datetime is not None else {}
    for p, tp in zip(topic.partitions, tps, strict=True):
        if tp in at_time:
            new[tp] = at_time[tp]
        elif args.to_earliest:
            new[tp] = p.log_start_offset
        elif args.to_latest:
            new[tp] = p.last_stable_offset
        else:
            if args.to_offset > p.high_watermark:
                raise OffsetOutOfRangeError(
                    f"--to-offset {args.to_offset} is past the high watermark {p.high_watermark} of "
                    f"{topic.name}-{p.partition}")
            new[tp] = args.to_offset
    if not args.dry_run:
        broker.commit_offsets(args.group, new)  # validates each offset against the partition's log
    rows = [{"partition": tp.partition, "previous_offset": before[tp], "new_offset": new[tp]} for tp in tps]
    if ctx.json:
        ctx.out.json({"group_id": args.group, "topic": topic.name, "dry_run": args.dry_run, "partitions": rows})
        return 0
    verb = "Would reset" if args.dry_run else "Reset"
    ctx.out.line(f"{verb} group {args.group} on topic {topic.name}:")
    ctx.out.table(["PARTITION", "PREVIOUS_OFFSET", "NEW_OFFSET"],
                  [[r["partition"], r["previous_offset"], r["new_offset"]] for r in rows])
    return 0

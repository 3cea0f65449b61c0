"""``txn-broker consume TOPIC``: print a topic's records, then exit once caught up.

Where it starts, per partition: the group's committed offset (``--group``), else the log
start with ``--from-beginning``, else the end (the last stable offset for read_committed),
as Kafka's console consumer does. It stops when a poll returns nothing (caught up to the
last stable offset, or the high watermark for read_uncommitted) or after ``--max-records``.
``--commit`` then commits the group's offsets: the position after the last record printed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import BINARY_ENCODINGS, ISOLATION_LEVELS, READ_COMMITTED
from .common import Context, UsageError, positive_int
from .records_io import json_rows

POLL_RECORDS = 1000
OUTPUT_FORMATS = ("jsonl", "table")


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    consume = commands.add_parser("consume", parents=[common], help="print a topic's records until caught up")
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument("--group", metavar="G", help="consumer group: start at its committed offsets")
    consume.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default=READ_COMMITTED)
    consume.add_argument("--from-beginning", action="store_true",
                         help="where the group has no committed offset (or without --group), start at the "
                              "log start instead of the end")
    consume.add_argument("--max-records", type=positive_int, metavar="N", help="stop after N records")
    consume.add_argument("--commit", action="store_true",
                         help="commit the group's offsets after the last record printed (needs --group)")
    consume.add_argument("--format", choices=OUTPUT_FORMATS, default="jsonl",
                         help="jsonl (default; also with --json) or a table")
    consume.add_argument("--binary-encoding", choices=BINARY_ENCODINGS, default="base64",
                         help="how binary values are printed (default base64)")
    consume.set_defaults(handler=consume_topic)


def consume_topic(ctx: Context, args: argparse.Namespace) -> int:
    if args.commit and args.group is None:
        raise UsageError("--commit needs --group")
    broker = ctx.broker
    consumer = broker.consumer(group_id=args.group, isolation_level=args.isolation_level,
                               auto_offset_reset="earliest" if args.from_beginning else "latest")
    as_table = args.format == "table" and not ctx.json
    table_rows: list[dict[str, Any]] = []
    count = 0
    try:
        consumer.subscribe([args.topic])
        for tp in consumer.assignment():  # every partition starts now (and is committed), read or not
            consumer.position(tp)
        while args.max_records is None or count < args.max_records:
            limit = POLL_RECORDS if args.max_records is None else min(POLL_RECORDS, args.max_records - count)
            batch = consumer.poll(max_records=limit)
            if batch.num_rows == 0:
                break
            count += batch.num_rows
            rows = json_rows(batch, args.binary_encoding)
            if as_table:
                table_rows.extend(rows)
            else:
                ctx.out.clear_status()  # a status line on the same terminal must not prefix a record
                ctx.out.out.write("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n"
                                          for r in rows))
                ctx.out.out.flush()
            ctx.out.status(f"consume {args.topic}: {count:,} records")
        if as_table:
            ctx.out.clear_status()
            _print_table(ctx, table_rows)
        if args.commit:
            consumer.commit()
    finally:
        consumer.close()
    if not ctx.json:
        committed = f"; committed offsets of group {args.group!r}" if args.commit else ""
        ctx.out.note(f"Consumed {count:,} record{'s' if count != 1 else ''} from {args.topic}{committed}.")
    return 0


def _print_table(ctx: Context, rows: list[dict[str, Any]]) -> None:
    if not rows:
        ctx.out.line(ctx.nothing_found("No records."))
        return
    headers = list(rows[0])

    def shown(value: Any) -> Any:
        if isinstance(value, dict | list):
            return json.dumps(value, ensure_ascii=False)
        return value

    ctx.out.table([h.lstrip("_").upper() for h in headers], [[shown(r.get(h)) for h in headers] for r in rows])

"""``txn-broker produce TOPIC --file F``: load a JSON Lines, CSV or Parquet file into a topic.

With ``--transactional-id`` the whole file is one transaction: it is initialised (fencing
any older producer with that id), every chunk is sent, then it commits; any error or an
interrupt aborts it, so all of the file lands or none of it does. Without it the
idempotent producer appends chunk by chunk: a failure part-way leaves the chunks already
flushed in the topic.
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING, Any

from .. import BINARY_ENCODINGS, RECORD_FORMATS, AppendResult, RecordSource, guess_format, open_records
from ..errors import SchemaMismatchError, TxnBrokerError
from .common import Context, UsageError, positive_int

if TYPE_CHECKING:
    from .. import Producer
    from .output import Progress

log = logging.getLogger(__name__)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    produce = commands.add_parser("produce", parents=[common], help="produce the records of a file to a topic")
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("--file", required=True, metavar="F", help="the input file; - reads standard input")
    produce.add_argument("--format", choices=RECORD_FORMATS,
                         help="default: from the file name (.jsonl/.ndjson/.json, .csv, .parquet/.pq)")
    produce.add_argument("--key", metavar="COLUMN", help="partition by a hash of this column")
    produce.add_argument("--transactional-id", metavar="ID", help="produce the whole file as one transaction")
    produce.add_argument("--transaction-timeout-ms", type=positive_int, default=None, metavar="MS",
                         help="with --transactional-id: abort if not committed within this time "
                              "(default: the broker's transaction_timeout_ms, 60000)")
    produce.add_argument("--binary-encoding", choices=BINARY_ENCODINGS, default="base64",
                         help="how binary values are written in jsonl and csv (default base64)")
    produce.set_defaults(handler=produce_file)


def produce_file(ctx: Context, args: argparse.Namespace) -> int:
    fmt = args.format or guess_format(args.file)
    if fmt is None:
        raise UsageError(f"cannot tell the format of {args.file!r} from its name: give --format "
                         f"({', '.join(RECORD_FORMATS)})")
    broker = ctx.broker
    topic = broker.describe_topic(args.topic)
    schema = topic.schema
    if args.key is not None and args.key not in schema.names:
        raise SchemaMismatchError(f"--key {args.key!r} is not a column of topic {args.topic!r}; "
                                  f"columns: {schema.names}")
    max_message_bytes = topic.config.get("max.message.bytes")
    source = open_records(args.file, fmt, schema, args.binary_encoding,
                          int(max_message_bytes) if max_message_bytes else None)
    progress = ctx.out.progress(f"produce {args.topic}", source.total_bytes)
    try:
        if args.transactional_id is not None:
            producer = broker.producer(transactional_id=args.transactional_id,
                                       transaction_timeout_ms=args.transaction_timeout_ms)
            appends = _in_one_transaction(producer, args, source, progress)
        else:
            producer = broker.producer()
            appends = _idempotent(producer, args, source, progress)
    finally:
        progress.close()
        source.close()
    _report(ctx, args, producer, appends, progress.records)
    return 0


def _send_chunks(producer: Producer, args: argparse.Namespace, source: RecordSource, progress: Progress,
                 flush_each: bool) -> list[AppendResult]:
    appends: list[AppendResult] = []
    for table, position in source.chunks():
        if source.total_records and not progress.total_records:
            progress.total_records = source.total_records
        producer.send(args.topic, table, key=args.key)
        if flush_each:
            appends.extend(producer.flush())
        progress.update(table.num_rows, position or None)
    return appends


def _in_one_transaction(producer: Producer, args: argparse.Namespace, source: RecordSource,
                        progress: Progress) -> list[AppendResult]:
    try:
        producer.init_transactions()
        producer.begin_transaction()
        try:
            _send_chunks(producer, args, source, progress, flush_each=False)
            return producer.commit_transaction()
        except BaseException:
            # a fenced producer must not abort (the newer instance owns the transaction), nor
            # one whose commit failed with an unknown outcome (close() settles that one)
            if producer.can_abort:
                try:
                    producer.abort_transaction()
                except TxnBrokerError as error:
                    log.warning("the transaction could not be aborted either (%s); the coordinator's "
                                "timeout sweep will abort it", error)
            raise
    finally:
        producer.close()


def _idempotent(producer: Producer, args: argparse.Namespace, source: RecordSource,
                progress: Progress) -> list[AppendResult]:
    try:
        return _send_chunks(producer, args, source, progress, flush_each=True)
    finally:
        producer.close()


def _report(ctx: Context, args: argparse.Namespace, producer: Producer, appends: list[AppendResult],
            records: int) -> None:
    by_partition: dict[int, dict[str, int]] = {}
    for a in sorted(appends, key=lambda a: (a.partition, a.base_offset)):
        if a.base_offset < 0:
            continue  # a retried append whose original was already removed by retention
        entry = by_partition.setdefault(a.partition, {"partition": a.partition, "first_offset": a.base_offset,
                                                      "last_offset": a.base_offset, "records": 0})
        entry["last_offset"] = max(entry["last_offset"], a.base_offset + a.record_count - 1)
        entry["records"] += a.record_count
    partitions = [by_partition[p] for p in sorted(by_partition)]
    if ctx.json:
        ctx.out.json({
            "topic": args.topic,
            "records": records,
            "transactional_id": args.transactional_id,
            "producer_id": producer.producer_id,
            "producer_epoch": producer.epoch,
            "partitions": partitions,
        })
        return
    how = (f" in one committed transaction ({args.transactional_id!r})" if args.transactional_id is not None
           else "")
    ctx.out.line(f"Produced {records:,} record{'s' if records != 1 else ''} to {args.topic}{how}.")
    if partitions:
        ctx.out.table(["PARTITION", "FIRST_OFFSET", "LAST_OFFSET", "RECORDS"],
                      [[p["partition"], p["first_offset"], p["last_offset"], p["records"]] for p in partitions])

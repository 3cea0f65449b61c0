"""``txn-broker iceberg sync | run | status``: publishing topics to their Iceberg tables
(docs/iceberg.md)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..errors import TxnBrokerError
from .common import Context, UsageError, check_database_url, positive_int
from .output import human_bytes, iso_ms


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    iceberg = commands.add_parser("iceberg", help="publish topics with iceberg.enabled to their Iceberg tables")
    actions = iceberg.add_subparsers(dest="action", metavar="ACTION", required=True)
    catalog = argparse.ArgumentParser(add_help=False)
    catalog.add_argument("--catalog-property", action="append", default=[], metavar="KEY=VALUE",
                         help="a pyiceberg catalog property (type=rest, uri=..., warehouse=...), repeatable; "
                              "none: the default SQL catalog in the broker's database")
    catalog.add_argument("--namespace", default=None, help="the tables' namespace (default txn_broker)")
    sync = actions.add_parser("sync", parents=[common, catalog],
                              help="publish everything committed up to now, then exit")
    sync.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic with iceberg.enabled")
    sync.set_defaults(handler=sync_tables)
    run = actions.add_parser("run", parents=[common, catalog], help="keep publishing at an interval")
    run.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic with iceberg.enabled")
    run.add_argument("--interval-ms", type=positive_int, default=2000, metavar="MS",
                     help="wait between publishes (default 2000)")
    run.add_argument("--rounds", type=positive_int, default=None, metavar="N",
                     help="stop after N publishes (default: run until interrupted)")
    run.set_defaults(handler=run_publisher)
    status = actions.add_parser("status", parents=[common, catalog],
                                help="per topic and partition: published offsets against the last stable offset")
    status.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic with iceberg.enabled")
    status.set_defaults(handler=show_status)


def _open(ctx: Context, args: argparse.Namespace) -> None:
    """The broker, with the catalog the command line names."""
    import txn_broker

    properties: dict[str, str] = {}
    for item in args.catalog_property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--catalog-property takes KEY=VALUE, got {item!r}")
        properties[key] = value
    check_database_url(ctx.database_url())
    ctx._broker = txn_broker.connect(args.database_url, args.storage_url, iceberg_catalog=properties or None,
                                     iceberg_namespace=args.namespace)


def sync_tables(ctx: Context, args: argparse.Namespace) -> int:
    _open(ctx, args)
    results = ctx.broker.publish_iceberg(args.topics or None)
    if ctx.json:
        ctx.out.json([r.to_dict() for r in results])
        return 0
    ctx.out.table(["TOPIC", "TABLE", "ROWS", "FILES", "BYTES", "SNAPSHOT", "OFFSETS"],
                  [[r.topic, r.table, r.rows, r.files, human_bytes(r.bytes),
                    r.snapshot_id if r.snapshot_id is not None else "(up to date)",
                    " ".join(f"{p}:{o}" for p, o in sorted(r.offsets.items()))] for r in results])
    return 0


def run_publisher(ctx: Context, args: argparse.Namespace) -> int:
    """Publish every ``--interval-ms``; a retriable failure is reported and tried again at
    the next round (the tables stay at their last snapshot)."""
    _open(ctx, args)
    rounds = 0
    while args.rounds is None or rounds < args.rounds:
        began = time.monotonic()
        try:
            results = ctx.broker.publish_iceberg(args.topics or None)
        except TxnBrokerError as error:
            if not error.retriable:
                raise
            ctx.out.status(f"iceberg: {error} (retrying)")
        else:
            if ctx.json:
                ctx.out.json([r.to_dict() for r in results if r.snapshot_id is not None])
            else:
                for r in results:
                    if r.snapshot_id is not None:
                        ctx.out.line(f"{r.table}: {r.rows} rows in {r.files} files, snapshot {r.snapshot_id}")
        rounds += 1
        if args.rounds is None or rounds < args.rounds:
            time.sleep(max(args.interval_ms / 1000 - (time.monotonic() - began), 0))
    return 0


def show_status(ctx: Context, args: argparse.Namespace) -> int:
    _open(ctx, args)
    statuses = ctx.broker.iceberg_status(args.topics or None)
    if ctx.json:
        ctx.out.json([s.to_dict() for s in statuses])
        return 0
    ctx.out.table(["TABLE", "PARTITION", "PUBLISHED", "LAST_STABLE", "BEHIND", "SECONDS_BEHIND", "SNAPSHOT_AT"],
                  [[s.table, p.partition, p.published_offset, p.last_stable_offset, p.offsets_behind,
                    f"{p.seconds_behind:.1f}", iso_ms(s.snapshot_ms)] for s in statuses for p in s.partitions])
    return 0

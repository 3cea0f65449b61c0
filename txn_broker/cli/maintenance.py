"""``txn-broker db upgrade``, ``gc`` and ``fsck``."""

from __future__ import annotations

import argparse
from typing import Any

from .common import Context, check_database_url, non_negative_int
from .output import human_bytes, human_duration


def register_db(commands: Any, common: argparse.ArgumentParser) -> None:
    db = commands.add_parser("db", help="the metadata database's schema")
    db_actions = db.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade = db_actions.add_parser("upgrade", parents=[common],
                                    help="apply pending schema migrations (run as the owner role)")
    upgrade.set_defaults(handler=db_upgrade)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    gc = commands.add_parser("gc", parents=[common],
                             help="delete objects of aborted transactions, expired segments and old orphans")
    gc.add_argument("--dry-run", action="store_true", help="report what would be deleted, change nothing")
    gc.add_argument("--orphan-grace-ms", type=non_negative_int, metavar="MS",
                    help="keep unregistered objects younger than this (default: max(24h, "
                         "max_transaction_timeout_ms))")
    gc.add_argument("--delete-delay-ms", type=non_negative_int, default=None, metavar="MS",
                    help="keep objects this long after their metadata is gone, for in-flight reads "
                         "(default 60000)")
    gc.set_defaults(handler=collect_garbage)

    fsck = commands.add_parser("fsck", parents=[common],
                               help="check metadata against object storage; exit 1 on any inconsistency")
    fsck.set_defaults(handler=fsck_check)


def db_upgrade(ctx: Context, args: argparse.Namespace) -> int:
    from .. import upgrade_schema

    url = ctx.database_url()
    check_database_url(url)
    done = upgrade_schema(url)
    if ctx.json:
        ctx.out.json({"database": done.database, "applied": done.applied, "current_version": done.current_version})
    elif done.applied:
        ctx.out.line(f"Upgraded {done.database}: applied {', '.join(done.applied)}.")
    else:
        ctx.out.line(f"{done.database} is current ({done.current_version}); nothing to apply.")
    return 0


def collect_garbage(ctx: Context, args: argparse.Namespace) -> int:
    report = ctx.broker.gc(dry_run=args.dry_run, orphan_grace_ms=args.orphan_grace_ms,
                           delete_delay_ms=args.delete_delay_ms,
                           progress=lambda message: ctx.out.status(f"gc: {message}"))
    ctx.out.clear_status()
    if ctx.json:
        ctx.out.json(report.to_dict())
        return 0
    out = ctx.out
    out.line("gc: dry run, nothing changed; it would do this:" if report.dry_run else "gc:")
    out.table(["STEP", "COUNT", "BYTES", "NOTE"], [
        ["aborted transactions: segments purged", report.aborted_segments, human_bytes(report.aborted_bytes),
         "hidden from readers, objects queued"],
        ["retention: segments truncated", report.retention_segments, human_bytes(report.retention_bytes),
         "log start moved, objects queued"],
        ["queued objects deleted", report.objects_deleted, None, ""],
        ["queued objects waiting", report.objects_waiting, None,
         f"delete delay {human_duration(report.delete_delay_ms)}"],
        ["orphan objects deleted", report.orphans_deleted, human_bytes(report.orphan_bytes),
         f"unregistered, older than {human_duration(report.orphan_grace_ms)}"],
        ["orphan objects kept", report.orphans_within_grace, None, "younger than the grace period"],
        ["Iceberg orphan files deleted", report.iceberg_orphans_deleted, human_bytes(report.iceberg_orphan_bytes),
         "under iceberg/, in no table"],
        ["Iceberg orphan files kept", report.iceberg_orphans_within_grace, None, "younger than the grace period"],
    ])
    if report.truncations:
        out.line()
        out.table(["TOPIC", "PARTITION", "OLD_LOG_START", "NEW_LOG_START", "SEGMENTS", "BYTES"],
                  [[t.topic, t.partition, t.old_log_start_offset, t.new_log_start_offset, t.segments,
                    human_bytes(t.size_bytes)] for t in report.truncations])
    return 0


def fsck_check(ctx: Context, args: argparse.Namespace) -> int:
    report = ctx.broker.fsck(progress=lambda message: ctx.out.status(f"fsck: {message}"))
    ctx.out.clear_status()
    if ctx.json:
        ctx.out.json(report.to_dict())
        return 0 if report.ok else 1
    out = ctx.out
    for f in report.problems:
        out.line(f"PROBLEM  {f.kind}: {f.message}")
    for f in report.warnings:
        out.line(f"WARNING  {f.kind}: {f.message}")
    unlisted = {k: n - sum(1 for f in report.problems + report.warnings if f.kind == k)
                for k, n in report.counts.items()}
    for kind, n in sorted(unlisted.items()):
        if n > 0:
            out.line(f"... and {n} more {kind}")
    n_problems = sum(n for k, n in report.counts.items() if k != "orphan_object")
    n_warnings = report.counts.get("orphan_object", 0)
    verdict = "OK" if report.ok else "INCONSISTENT"
    out.line(f"fsck: {verdict}: {report.partitions_checked} partitions, {report.segments_checked} segments, "
             f"{report.objects_checked} objects checked; {n_problems} problem{'s' if n_problems != 1 else ''}, "
             f"{n_warnings} warning{'s' if n_warnings != 1 else ''}.")
    return 0 if report.ok else 1

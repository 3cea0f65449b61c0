"""``txn-broker db upgrade``, ``gc``, ``compact`` and ``fsck``."""

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
    gc.add_argument("--no-compact", dest="compact", action="store_false",
                    help="skip compaction (merging small segments); `txn-broker compact` runs it alone")
    gc.set_defaults(handler=collect_garbage)

    compact = commands.add_parser("compact", parents=[common],
                                  help="merge small committed segments into segments of about segment.bytes")
    compact.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to compact (default: every topic)")
    compact.add_argument("--dry-run", action="store_true", help="report what would be merged, change nothing")
    compact.add_argument("--min-age-ms", type=non_negative_int, default=None, metavar="MS",
                         help="merge segments at least this old (default: each topic's min.compaction.lag.ms)")
    compact.set_defaults(handler=compact_segments)

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
                           delete_delay_ms=args.delete_delay_ms, compact=args.compact,
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
        ["compaction: segments merged", report.compacted_segments, human_bytes(report.compacted_bytes),
         f"into {report.compaction_outputs}, objects queued"
         + (f"; {report.compaction_conflicts} merges left for the next run" if report.compaction_conflicts else "")],
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


def compact_segments(ctx: Context, args: argparse.Namespace) -> int:
    report = ctx.broker.compact(args.topics or None, dry_run=args.dry_run, min_age_ms=args.min_age_ms,
                                progress=lambda message: ctx.out.status(f"compact: {message}"))
    ctx.out.clear_status()
    if ctx.json:
        ctx.out.json(report.to_dict())
        return 0
    out = ctx.out
    out.line("compact: dry run, nothing changed; it would do this:" if report.dry_run else "compact:")
    out.table(["WHAT", "COUNT", "BYTES", "NOTE"], [
        ["partitions checked", report.partitions_checked, None, ""],
        ["partitions compacted", report.partitions_compacted, None, ", ".join(report.topics)],
        ["segments merged", report.segments_replaced, human_bytes(report.bytes_replaced),
         "objects queued for deletion (gc deletes them after its delete delay)"],
        ["segments written", report.segments_written, None if report.dry_run else human_bytes(report.bytes_written),
         f"{report.records} records"],
        ["aborted records dropped", report.aborted_records_dropped, None, "their offsets are gaps"],
        ["merges left for the next run", report.conflicts, None, "their inputs changed meanwhile"],
    ])
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

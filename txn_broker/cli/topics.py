"""``txn-broker topics create | alter | list | describe | delete | delete-records``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import TopicDescription
from .common import Context, UsageError, positive_int
from .output import human_bytes, iso_ms
from .schema_spec import parse_schema, read_schema_file, schema_to_json


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    topics = commands.add_parser("topics", help="create, list, describe and delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=positive_int, required=True, metavar="N")
    schema = create.add_mutually_exclusive_group()
    schema.add_argument("--schema", metavar="'col:type,...'",
                        help="columns, e.g. 'id:int64 not null,name:string,ts:timestamp[ms]' "
                             "(default: Kafka's key, value, headers)")
    schema.add_argument("--schema-file", metavar="F", help="a JSON schema description (docs/cli.md)")
    create.add_argument("--config", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        type=_config_item,
                        help="retention.ms, retention.bytes, max.message.bytes, compression.type "
                             "(uncompressed, lz4, zstd)")
    create.set_defaults(handler=create_topic, creates=True)

    alter = actions.add_parser(
        "alter", parents=[common],
        help="change a topic while pipelines run: the next schema version, more partitions, configs")
    alter.add_argument("name", metavar="NAME")
    new_schema = alter.add_mutually_exclusive_group()
    new_schema.add_argument(
        "--schema", metavar="'col:type,...'",
        help="the whole new schema, e.g. 'id:int64 not null,amount:float64,currency:string default \"EUR\"'; "
             "fields match the latest version by name, or by 'id N' (a rename: the new name with the old id)")
    new_schema.add_argument("--schema-file", metavar="F",
                            help="the new schema as JSON (edit the output of `topics describe --json`)")
    alter.add_argument("--partitions", type=positive_int, metavar="N", help="the new partition count (only grows)")
    alter.add_argument("--config", action="extend", nargs="+", default=[], metavar="KEY=VALUE", type=_config_item,
                       help="topic configs to change, e.g. retention.ms=86400000 schema.compatibility=FULL")
    alter.add_argument("--by", metavar="WHO", help="who the alteration is recorded as (default: user@host)")
    alter.set_defaults(handler=alter_topic)

    listing = actions.add_parser("list", parents=[common], help="list topics")
    listing.set_defaults(handler=list_topics)

    describe = actions.add_parser("describe", parents=[common],
                                  help="a topic's config, schema and per-partition offsets")
    describe.add_argument("name", metavar="NAME")
    describe.set_defaults(handler=describe_topic)

    delete = actions.add_parser("delete", parents=[common], help="delete a topic and its data")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(handler=delete_topic)

    records = actions.add_parser(
        "delete-records", parents=[common],
        help="delete a topic's records below an offset per partition (Kafka's kafka-delete-records)")
    records.add_argument("name", metavar="NAME", nargs="?", help="the topic (with --offset)")
    records.add_argument("--offset", action="extend", nargs="+", default=[], metavar="PARTITION=OFFSET",
                         type=_offset_item,
                         help="move PARTITION's log start to OFFSET (-1: its high watermark)")
    records.add_argument("--offset-json-file", metavar="F",
                         help='kafka-delete-records\' file: {"partitions": [{"topic": "t", "partition": 0, '
                              '"offset": 10}], "version": 1}')
    records.set_defaults(handler=delete_records)


def _config_item(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _offset_item(text: str) -> tuple[int, int]:
    partition, sep, offset = text.partition("=")
    try:
        if sep:
            return int(partition), int(offset)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected PARTITION=OFFSET (integers), got {text!r}")


def _schema_arg(args: argparse.Namespace) -> Any:
    if args.schema is not None:
        return parse_schema(args.schema)
    if args.schema_file is not None:
        return read_schema_file(args.schema_file)
    return None


def _config_arg(args: argparse.Namespace) -> dict[str, str]:
    config: dict[str, str] = {}
    for key, value in args.config:
        if key in config:
            raise UsageError(f"--config {key} given twice")
        config[key] = value
    return config


def create_topic(ctx: Context, args: argparse.Namespace) -> int:
    schema = _schema_arg(args)
    config = _config_arg(args)
    desc = ctx.broker.create_topic(args.name, partitions=args.partitions, schema=schema, config=config)
    if ctx.json:
        ctx.out.json(topic_json(desc))
    else:
        ctx.out.line(f"Created topic {desc.name} with {len(desc.partitions)} partition"
                     f"{'s' if len(desc.partitions) != 1 else ''}.")
    return 0


def alter_topic(ctx: Context, args: argparse.Namespace) -> int:
    schema = _schema_arg(args)
    config = _config_arg(args)
    if schema is None and args.partitions is None and not config:
        raise UsageError("topics alter needs --schema, --schema-file, --partitions or --config")
    broker = ctx.broker
    before = len(broker.topic_alterations(args.name))
    desc = broker.alter_topic(args.name, schema=schema, partitions=args.partitions, config=config or None,
                              by=args.by)
    done = broker.topic_alterations(args.name)[before:]
    changes = done[-1]["changes"] if done else {}
    if ctx.json:
        ctx.out.json({"topic": desc.name, "changed": bool(changes), "changes": changes,
                      "schema_version": desc.schema_version, "partition_count": len(desc.partitions)})
        return 0
    if not changes:
        ctx.out.line(f"Topic {desc.name} unchanged (it is already so).")
        return 0
    ctx.out.line(f"Altered topic {desc.name}:")
    for line in change_lines(changes):
        ctx.out.line(f"  {line}")
    return 0


def change_lines(changes: dict[str, Any]) -> list[str]:
    """An alteration's changes, one line each, for people."""
    lines = []
    if "schema" in changes:
        schema = changes["schema"]
        lines.append(f"schema version {schema['from']} -> {schema['to']}: " + "; ".join(schema["changes"]))
    if "partitions" in changes:
        lines.append(f"partitions {changes['partitions']['from']} -> {changes['partitions']['to']}")
    for key, change in sorted(changes.get("config", {}).items()):
        lines.append(f"{key} {change['from']} -> {change['to']}")
    return lines


def list_topics(ctx: Context, args: argparse.Namespace) -> int:
    broker = ctx.broker
    descriptions = [broker.describe_topic(name) for name in broker.list_topics()]
    rows = [_summary(d) for d in descriptions]
    if ctx.json:
        ctx.out.json({"topics": rows})
        return 0
    ctx.out.table(["TOPIC", "PARTITIONS", "RECORDS", "SEGMENTS", "BYTES", "RETENTION_MS", "RETENTION_BYTES"],
                  [[r["name"], r["partition_count"], r["records"], r["segments"], human_bytes(r["size_bytes"]),
                    r["config"]["retention.ms"], r["config"]["retention.bytes"]] for r in rows],
                  empty=ctx.nothing_found("No topics."))
    return 0


def _summary(desc: TopicDescription) -> dict[str, Any]:
    return {
        "name": desc.name,
        "topic_id": desc.topic_id,
        "partition_count": len(desc.partitions),
        "records": sum(p.high_watermark - p.log_start_offset for p in desc.partitions),
        "segments": sum(p.segment_count for p in desc.partitions),
        "size_bytes": sum(p.size_bytes for p in desc.partitions),
        "config": dict(desc.config),
    }


def topic_json(desc: TopicDescription) -> dict[str, Any]:
    return {
        "name": desc.name,
        "topic_id": desc.topic_id,
        "created_ms": desc.created_ms,
        "config": dict(desc.config),
        "schema": schema_to_json(desc.schema),
        "schema_version": desc.schema_version,
        "schema_versions": [{"version": v.version, "created_ms": v.created_ms, "created_by": v.created_by,
                             **schema_to_json(v.schema)} for v in desc.schema_versions],
        "partitions": [
            {"partition": p.partition, "log_start_offset": p.log_start_offset,
             "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable_offset,
             "segments": p.segment_count, "size_bytes": p.size_bytes}
            for p in desc.partitions
        ],
    }


def describe_topic(ctx: Context, args: argparse.Namespace) -> int:
    desc = ctx.broker.describe_topic(args.name)
    if ctx.json:
        ctx.out.json(topic_json(desc))
        return 0
    out = ctx.out
    out.fields([
        ("Topic", desc.name),
        ("Topic id", desc.topic_id),
        ("Created", iso_ms(desc.created_ms)),
        ("Partitions", len(desc.partitions)),
        ("Config", ", ".join(f"{k}={v}" for k, v in sorted(desc.config.items()))),
        ("Schema version", desc.schema_version),
    ])
    out.line()
    out.table(["COLUMN", "TYPE", "NULLABLE", "ID", "DEFAULT"],
              [[f["name"], f["type"], f["nullable"], f.get("id", ""),
                json.dumps(f["default"]) if "default" in f else ""] for f in schema_to_json(desc.schema)["fields"]])
    out.line()
    out.table(["VERSION", "CREATED", "BY", "COLUMNS"],
              [[v.version, iso_ms(v.created_ms), v.created_by, ", ".join(v.schema.names)]
               for v in desc.schema_versions])
    out.line()
    out.table(["PARTITION", "LOG_START_OFFSET", "HIGH_WATERMARK", "LAST_STABLE_OFFSET", "SEGMENTS", "BYTES"],
              [[p.partition, p.log_start_offset, p.high_watermark, p.last_stable_offset, p.segment_count,
                human_bytes(p.size_bytes)] for p in desc.partitions])
    return 0


def delete_topic(ctx: Context, args: argparse.Namespace) -> int:
    ctx.broker.delete_topic(args.name)
    if ctx.json:
        ctx.out.json({"deleted": args.name})
    else:
        ctx.out.line(f"Deleted topic {args.name}.")
    return 0


def _deletions(args: argparse.Namespace) -> dict[str, dict[int, int]]:
    """``{topic: {partition: offset}}`` from ``NAME --offset ...`` or ``--offset-json-file``."""
    if args.offset_json_file is not None:
        if args.name is not None or args.offset:
            raise UsageError("give either --offset-json-file or NAME with --offset, not both")
        try:
            with open(args.offset_json_file, encoding="utf-8") as f:
                document = json.load(f)
            entries = [(str(e["topic"]), e["partition"], e["offset"]) for e in document["partitions"]]
        except OSError as error:
            raise UsageError(f"cannot read {args.offset_json_file}: {error.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{args.offset_json_file} is not a kafka-delete-records offset file "
                             '({"partitions": [{"topic": ..., "partition": ..., "offset": ...}]})') from None
    elif args.name is None or not args.offset:
        raise UsageError("give NAME and --offset PARTITION=OFFSET, or --offset-json-file")
    else:
        entries = [(args.name, p, o) for p, o in args.offset]
    out: dict[str, dict[int, int]] = {}
    for topic, partition, offset in entries:
        if partition in out.setdefault(topic, {}):
            raise UsageError(f"{topic}-{partition} is given twice")
        out[topic][partition] = offset
    return out


def delete_records(ctx: Context, args: argparse.Namespace) -> int:
    rows = []
    for topic, offsets in _deletions(args).items():
        for partition, low in sorted(ctx.broker.delete_records(topic, offsets).items()):
            rows.append({"topic": topic, "partition": partition, "low_watermark": low})
    if ctx.json:
        ctx.out.json({"partitions": rows})
    else:
        ctx.out.table(["TOPIC", "PARTITION", "LOW_WATERMARK"],
                      [[r["topic"], r["partition"], r["low_watermark"]] for r in rows])
    return 0

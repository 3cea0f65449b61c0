"""``txn-broker topics create | list | describe | delete``."""

from __future__ import annotations

import argparse
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

    listing = actions.add_parser("list", parents=[common], help="list topics")
    listing.set_defaults(handler=list_topics)

    describe = actions.add_parser("describe", parents=[common],
                                  help="a topic's config, schema and per-partition offsets")
    describe.add_argument("name", metavar="NAME")
    describe.set_defaults(handler=describe_topic)

    delete = actions.add_parser("delete", parents=[common], help="delete a topic and its data")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(handler=delete_topic)


def _config_item(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def create_topic(ctx: Context, args: argparse.Namespace) -> int:
    schema = None
    if args.schema is not None:
        schema = parse_schema(args.schema)
    elif args.schema_file is not None:
        schema = read_schema_file(args.schema_file)
    config = {}
    for key, value in args.config:
        if key in config:
            raise UsageError(f"--config {key} given twice")
        config[key] = value
    desc = ctx.broker.create_topic(args.name, partitions=args.partitions, schema=schema, config=config)
    if ctx.json:
        ctx.out.json(topic_json(desc))
    else:
        ctx.out.line(f"Created topic {desc.name} with {len(desc.partitions)} partition"
                     f"{'s' if len(desc.partitions) != 1 else ''}.")
    return 0


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
    ])
    out.line()
    out.table(["COLUMN", "TYPE", "NULLABLE"], [[f.name, str(f.type), f.nullable] for f in desc.schema])
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

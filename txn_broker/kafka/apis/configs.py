"""Topic configs through Kafka's APIs: DescribeConfigs (32), AlterConfigs (33) and
IncrementalAlterConfigs (44), the last two through ``Broker.alter_topic``.

Every config of a topic is answered: the broker's own (``topic_configs.TOPIC_CONFIGS``,
those Kafka also has mapped to it: retention, sizes, compression, segment.bytes), and Kafka's
other topic configs, accepted and ignored (``KAFKA_IGNORED_CONFIGS``), which say so in their
documentation field."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import InvalidConfigError, TxnBrokerError
from ...topic_configs import KAFKA_IGNORED_CONFIGS, TOPIC_CONFIGS
from ..authorizer import CLUSTER_NAME, Operation, ResourceType
from ..errors import error_code
from .base import Api, Listener, Payload, RequestContext, allows

#: Kafka's ConfigResource types
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
#: Kafka's ConfigSource codes
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5
#: Kafka's ConfigType codes
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_LISTS = {"cleanup.policy", "follower.replication.throttled.replicas", "leader.replication.throttled.replicas"}
_INTS = {"max.message.bytes", "segment.bytes", "index.interval.bytes", "min.insync.replicas", "segment.index.bytes",
         "compression.gzip.level", "compression.lz4.level", "compression.zstd.level"}


def config_type(name: str, text: str) -> int:
    if name in _LISTS:
        return LIST
    if name in _INTS:
        return INT
    if text in ("true", "false"):
        return BOOLEAN
    if re.fullmatch(r"-?\d+", text):
        return LONG
    if re.fullmatch(r"-?\d+\.\d+", text):
        return DOUBLE
    return STRING


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def topic_entries(config: dict[str, Any], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """Every config of a topic as DescribeConfigs lists it, by name."""
    out: list[dict[str, Any]] = []
    for name in sorted({*TOPIC_CONFIGS, *KAFKA_IGNORED_CONFIGS}):
        if name in TOPIC_CONFIGS:
            value = config.get(name, defaults.get(name))
            default = defaults.get(name)
            doc = TOPIC_CONFIGS[name].doc
        else:
            value = config.get(name, KAFKA_IGNORED_CONFIGS[name])
            default = KAFKA_IGNORED_CONFIGS[name]
            doc = "accepted and ignored: Kafka's config has no meaning in txn-broker (docs/kafka-protocol.md)"
        text = as_text(value)
        out.append({"name": name, "value": text, "read_only": False, "is_default": value == default,
                    "config_source": DEFAULT_CONFIG if value == default else DYNAMIC_TOPIC_CONFIG,
                    "is_sensitive": False, "synonyms": [], "config_type": config_type(name, text),
                    "documentation": doc})
    return out


async def describe_configs(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    results = []
    for r in req.resources:
        rtype, name = int(r.resource_type), r.resource_name
        out: dict[str, Any] = {"resource_type": rtype, "resource_name": name, "configs": [],
                               "error_code": ErrorCode.none, "error_message": None}
        if rtype == TOPIC_RESOURCE:
            if not allows(server, ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
                results.append({**out, "error_code": ErrorCode.topic_authorization_failed})
                continue
            got, code = await server.attempt(server.backend.topic_config, name)
            if got is None:
                results.append({**out, "error_code": code, "error_message": code.name})
                continue
            entries = topic_entries(*got)
            if r.configuration_keys is not None:
                keys = set(r.configuration_keys)
                entries = [e for e in entries if e["name"] in keys]
            if not getattr(req, "include_documentation", False):
                entries = [{**e, "documentation": None} for e in entries]
            results.append({**out, "configs": entries})
        elif rtype == BROKER_RESOURCE:
            # a listener has no Kafka broker configs of its own to show (its settings are
            # `txn-broker serve` options): an empty list, as for a broker with none set
            if not allows(server, ctx, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
                results.append({**out, "error_code": ErrorCode.cluster_authorization_failed})
                continue
            results.append(out)
        else:
            results.append({**out, "error_code": ErrorCode.invalid_request,
                            "error_message": f"resource type {rtype} has no configs here"})
    return {"throttle_time": 0, "results": results}


#: IncrementalAlterConfigs' operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental_changes(current: dict[str, Any], configs: Any) -> dict[str, str | None]:
    """IncrementalAlterConfigs' operations as changes (None: back to the default); APPEND
    and SUBTRACT edit a list config's comma-separated items."""
    changes: dict[str, str | None] = {}
    for c in configs:
        op = int(c.config_operation)
        if op == SET:
            changes[c.name] = c.value
        elif op == DELETE:
            changes[c.name] = None
        elif op in (APPEND, SUBTRACT) and c.name in _LISTS:
            now = changes.get(c.name) or as_text(current.get(c.name, KAFKA_IGNORED_CONFIGS.get(c.name, "")))
            items = [i for i in now.split(",") if i]
            given = [i for i in (c.value or "").split(",") if i]
            items = items + [i for i in given if i not in items] if op == APPEND else \
                [i for i in items if i not in given]
            changes[c.name] = ",".join(items)
        else:
            raise InvalidConfigError(f"operation {op} on {c.name!r}: APPEND and SUBTRACT apply to list configs "
                                     f"({', '.join(sorted(_LISTS))})")
    return changes


async def _alter(server: Listener, ctx: RequestContext, req: Any, incremental: bool) -> Payload:
    responses = []
    for r in req.resources:
        rtype, name = int(r.resource_type), r.resource_name
        out = {"resource_type": rtype, "resource_name": name, "error_code": ErrorCode.none, "error_message": None}
        if rtype != TOPIC_RESOURCE:
            responses.append({**out, "error_code": ErrorCode.invalid_request,
                              "error_message": "only topic configs can be changed here"})
            continue
        if not allows(server, ctx, Operation.ALTER_CONFIGS, ResourceType.TOPIC, name):
            responses.append({**out, "error_code": ErrorCode.topic_authorization_failed})
            continue
        try:
            if incremental:
                current, _ = await server.call(server.backend.topic_config, name)
                changes = incremental_changes(current, r.configs)
            else:
                changes = {c.name: c.value for c in r.configs}
            await server.call(partial(server.backend.alter_configs, name, changes, replace=not incremental,
                                      validate_only=bool(req.validate_only), by=_by(ctx)))
        except TxnBrokerError as error:
            code = error_code(error)
            responses.append({**out, "error_code": code, "error_message": str(error)[:500]})
            continue
        responses.append(out)
    return {"throttle_time": 0, "responses": responses}


def _by(ctx: RequestContext) -> str:
    """Who a change through the listener is recorded as made by (``Broker.alter_topic``)."""
    principal = ctx.principal
    return f"{principal.name}@{principal.host} (kafka)"


async def alter_configs(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    """Kafka's AlterConfigs: a resource's configs replaced (those not given: defaults)."""
    return await _alter(server, ctx, req, incremental=False)


async def incremental_alter_configs(server: Listener, ctx: RequestContext, req: Any) -> Payload:
    return await _alter(server, ctx, req, incremental=True)


APIS = (
    Api(32, "DescribeConfigs", 1, 4, describe_configs),
    Api(33, "AlterConfigs", 0, 2, alter_configs),
    Api(44, "IncrementalAlterConfigs", 0, 1, incremental_alter_configs),
)

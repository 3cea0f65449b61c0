"""Creating a pipeline's topics idempotently (the setup task of every example DAG)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from txn_broker.errors import InvalidConfigError, SchemaMismatchError, TopicAlreadyExistsError

if TYPE_CHECKING:
    from txn_broker import Broker


def ensure_topics(broker: Broker, topics: Mapping[str, tuple[int, pa.Schema | None]],
                  config: dict[str, Any] | None = None) -> dict[str, str]:
    """Create each ``name: (partitions, schema)`` that does not exist yet. An existing
    topic must have the same partition count and schema (SchemaMismatchError /
    InvalidConfigError otherwise). Safe to run concurrently and repeatedly.
    Returns ``{name: "created" | "exists"}``."""
    done: dict[str, str] = {}
    existing = set(broker.list_topics())
    for name, (partitions, schema) in topics.items():
        if name not in existing:
            try:
                broker.create_topic(name, partitions=partitions, schema=schema, config=config)
                done[name] = "created"
                continue
            except TopicAlreadyExistsError:
                pass  # created concurrently: check it like any existing one
        described = broker.describe_topic(name)
        if len(described.partitions) != partitions:
            raise InvalidConfigError(
                f"topic {name!r} exists with {len(described.partitions)} partitions, expected {partitions}")
        if schema is not None and not described.schema.equals(schema.remove_metadata()):
            raise SchemaMismatchError(f"topic {name!r} exists with schema {described.schema}, expected {schema}")
        done[name] = "exists"
    return done

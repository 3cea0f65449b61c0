"""A property of schema evolution (issue 26): under a random sequence of schema changes
with writes between them, every record reads back under each later schema with the
values the rules define (a field by its id: renamed, widened, dropped; a field added
later reads as its default or null), and every incompatible change is refused with
IncompatibleSchemaError and changes nothing. Both backends."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from fuzz.conftest import unique
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txn_broker import field_id, with_default, with_field_id
from txn_broker.errors import IncompatibleSchemaError

pytestmark = pytest.mark.integration

TYPES = {"int32": pa.int32(), "int64": pa.int64(), "float32": pa.float32(), "float64": pa.float64(),
         "string": pa.string()}
WIDER = {pa.int32(): pa.int64(), pa.float32(): pa.float64()}
NARROWER = {pa.int64(): pa.int32(), pa.float64(): pa.float32()}
DEFAULTS = {pa.int32(): 7, pa.int64(): 7, pa.float32(): 1.5, pa.float64(): 1.5, pa.string(): "d"}

steps = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(1, 3)),
    st.tuples(st.just("add"), st.sampled_from(sorted(TYPES)), st.booleans()),
    st.tuples(st.sampled_from(["drop", "rename", "widen", "nullable"]), st.integers(0, 9)),
    st.tuples(st.just("bad"), st.sampled_from(["narrow", "required", "retype"]), st.integers(0, 9)),
), min_size=1, max_size=7)


def _value(t: pa.DataType, rid: int, fid: int) -> Any:
    """The value record ``rid`` holds in field ``fid``: exact in every wider type."""
    if pa.types.is_integer(t):
        return rid * 100 + fid
    if pa.types.is_floating(t):
        return rid + 0.5
    return f"{rid}-{fid}"


def _change(schema: pa.Schema, op: tuple[Any, ...], counter: int) -> tuple[pa.Schema | None, bool]:
    """The proposed schema for ``op`` (None: not applicable) and whether it is compatible."""
    fields = list(schema)
    own = [i for i, f in enumerate(fields) if f.name != "rid"]
    kind = op[0]
    if kind == "add":
        field = pa.field(f"c{counter}", TYPES[op[1]], nullable=not op[2])
        if op[2]:
            field = with_default(field, DEFAULTS[field.type])
        return pa.schema([*fields, field]), True
    if kind == "bad" and op[1] == "required":
        return pa.schema([*fields, pa.field(f"c{counter}", pa.int64(), nullable=False)]), False
    if not own:
        return None, True
    i = own[op[2 if kind == "bad" else 1] % len(own)]
    f = fields[i]
    if kind == "drop":
        return pa.schema(fields[:i] + fields[i + 1:]), True
    if kind == "rename":
        fields[i] = with_field_id(pa.field(f"r{counter}", f.type, f.nullable, f.metadata), field_id(f) or 0)
    elif kind == "widen":
        if f.type not in WIDER:
            return None, True
        fields[i] = f.with_type(WIDER[f.type])
    elif kind == "nullable":
        fields[i] = f.with_nullable(True)
    elif op[1] == "narrow":
        if f.type not in NARROWER:
            return None, True
        fields[i] = f.with_type(NARROWER[f.type])
        return pa.schema(fields), False
    else:  # retype
        fields[i] = f.with_type(pa.int64() if pa.types.is_string(f.type) else pa.string())
        return pa.schema(fields), False
    return pa.schema(fields), True


@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=steps)
def test_every_record_reads_under_every_later_schema(broker, plan):
    topic = unique("evolve")
    broker.create_topic(topic, 2, pa.schema([pa.field("rid", pa.int64(), nullable=False), ("c0", pa.int32())]))
    producer = broker.producer()
    records: list[dict[int, Any]] = []  # what each record holds, by field id
    defaults: dict[int, Any] = {}
    for counter, op in enumerate(plan, start=1):
        before = broker.describe_topic(topic)
        if op[0] == "write":
            rows = []
            for _ in range(op[1]):
                rid = len(records)
                records.append({field_id(f): _value(f.type, rid, field_id(f)) for f in before.schema})
                rows.append({f.name: records[-1][field_id(f)] for f in before.schema})
            producer.send(topic, rows)
            producer.flush()
            continue
        proposed, compatible = _change(before.schema, op, counter)
        if proposed is None:
            continue
        if not compatible:
            with pytest.raises(IncompatibleSchemaError):
                broker.alter_topic(topic, schema=proposed)
            after = broker.describe_topic(topic)
            assert after.schema_version == before.schema_version
            assert after.schema.equals(before.schema, check_metadata=True)
            continue
        after = broker.alter_topic(topic, schema=proposed)
        for f in after.schema:
            if op[0] == "add" and f.name == f"c{counter}" and op[2]:
                defaults[field_id(f)] = DEFAULTS[f.type]
        # every record so far, under this (later) schema
        latest = after.schema
        consumer = broker.consumer()
        consumer.subscribe([topic])
        got = []
        while (table := consumer.poll()).num_rows:
            assert table.column_names[4:] == latest.names  # one schema per poll: the latest
            got += table.to_pylist()
        consumer.close()
        got.sort(key=lambda r: r["rid"])
        expected = [{f.name: rec.get(field_id(f), defaults.get(field_id(f))) for f in latest} for rec in records]
        assert [{k: r[k] for k in latest.names} for r in got] == expected

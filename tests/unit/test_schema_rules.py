"""Schema evolution without a database: ids given to a changed schema, the structural
rules and the compatibility modes, writers' versions, and the projection by field id."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txn_broker.errors import IncompatibleSchemaError, SchemaMismatchError
from txn_broker.log.field_ids import field_id, iter_field_ids, with_field_id
from txn_broker.log.projection import Projection, project
from txn_broker.log.segment_format import decode_segment, encode_segment
from txn_broker.topic_schemas import (
    SchemaVersion,
    check_change,
    conform_send,
    evolve_ids,
    new_topic_schema,
    promotes,
    with_default,
    with_ids,
    writer_versions,
)


def _versions(*schemas: pa.Schema) -> list[SchemaVersion]:
    return [SchemaVersion(i + 1, s, 0, "test") for i, s in enumerate(schemas)]


def _ids(schema: pa.Schema) -> dict[str, int | None]:
    return {".".join(path): fid for path, fid in iter_field_ids(schema)}


def test_new_fields_take_the_next_ids_and_renames_keep_theirs():
    v1, last = new_topic_schema(pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())),
                                           ("who", pa.struct([("name", pa.string())]))]))
    assert _ids(v1) == {"id": 5, "tags": 6, "who": 7, "tags.element": 8, "who.name": 9} and last == 9
    # rename id -> order_id (by id), add a column, drop tags, add a struct member
    proposed = pa.schema([with_field_id(pa.field("order_id", pa.int64()), 5),
                          pa.field("who", pa.struct([("name", pa.string()), ("email", pa.string())])),
                          pa.field("note", pa.string())])
    v2, last = evolve_ids(v1, last, proposed)
    assert _ids(v2) == {"order_id": 5, "who": 7, "who.name": 9, "who.email": 10, "note": 11} and last == 11
    # a field named like a renamed one, without an id, is new
    v3, last = evolve_ids(v2, last, pa.schema([with_field_id(pa.field("key", pa.int64()), 5),
                                               pa.field("order_id", pa.int64())]))
    assert _ids(v3) == {"key": 5, "order_id": 12}
    with pytest.raises(IncompatibleSchemaError) as error:
        evolve_ids(v2, last, pa.schema([with_field_id(pa.field("x", pa.int64()), 99)]))
    assert error.value.rule == "unknown field id" and error.value.field == "x"


def test_a_stored_schema_without_ids_reads_as_fresh_ids():
    plain = pa.schema([("a", pa.int32()), ("m", pa.map_(pa.string(), pa.int64()))])
    assert _ids(with_ids(plain)) == {"a": 5, "m": 6, "m.key": 7, "m.value": 8}
    assert with_ids(with_ids(plain)) == with_ids(plain)


@pytest.mark.parametrize(("old", "new", "rule", "field"), [
    (pa.field("a", pa.int64()), pa.field("a", pa.int32()), "type change is not a widening", "a"),
    (pa.field("a", pa.string()), pa.field("a", pa.int64()), "type change is not a widening", "a"),
    (pa.field("a", pa.float64()), pa.field("a", pa.float32()), "type change is not a widening", "a"),
    (pa.field("a", pa.decimal128(10, 2)), pa.field("a", pa.decimal128(12, 3)), "type change is not a widening",
     "a"),
    (pa.field("a", pa.int64()), pa.field("a", pa.int64(), nullable=False), "optional to required", "a"),
    (pa.field("s", pa.struct([("x", pa.int64())])), pa.field("s", pa.struct([("x", pa.int8())])),
     "type change is not a widening", "s.x"),
])
def test_structural_rules_refuse(old, new, rule, field):
    v1, last = new_topic_schema(pa.schema([pa.field("id", pa.int64()), old]))
    proposed, _ = evolve_ids(v1, last, pa.schema([pa.field("id", pa.int64()), new]))
    with pytest.raises(IncompatibleSchemaError) as error:
        check_change(_versions(v1), proposed, "NONE")  # in every mode, NONE included
    assert (error.value.rule, error.value.field) == (rule, field)
    assert field in str(error.value)


def test_a_required_column_needs_a_default():
    v1, last = new_topic_schema(pa.schema([("id", pa.int64())]))
    required = pa.field("currency", pa.string(), nullable=False)
    proposed, _ = evolve_ids(v1, last, pa.schema([pa.field("id", pa.int64()), required]))
    with pytest.raises(IncompatibleSchemaError) as error:
        check_change(_versions(v1), proposed, "BACKWARD")
    assert (error.value.rule, error.value.field) == ("required field without a default", "currency")
    proposed, _ = evolve_ids(v1, last, pa.schema([pa.field("id", pa.int64()), with_default(required, "EUR")]))
    check_change(_versions(v1), proposed, "BACKWARD")
    bad, _ = evolve_ids(v1, last, pa.schema([pa.field("id", pa.int64()), with_default(required, [1])]))
    with pytest.raises(IncompatibleSchemaError) as error:
        check_change(_versions(v1), bad, "BACKWARD")
    assert error.value.rule == "invalid default"


@pytest.mark.parametrize(("w", "r", "ok"), [
    (pa.int8(), pa.int64(), True), (pa.int32(), pa.int64(), True), (pa.int64(), pa.int32(), False),
    (pa.uint8(), pa.uint32(), True), (pa.int32(), pa.uint64(), False), (pa.float32(), pa.float64(), True),
    (pa.decimal128(9, 2), pa.decimal128(18, 2), True), (pa.decimal128(9, 2), pa.decimal256(40, 2), True),
    (pa.decimal128(9, 2), pa.decimal128(18, 3), False), (pa.int32(), pa.float64(), False),
    (pa.string(), pa.large_string(), False),
])
def test_promotions(w, r, ok):
    assert promotes(w, r) is ok


def test_the_modes_add_the_reverse_check_and_transitivity():
    v1, last = new_topic_schema(pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int32())]))
    versions = _versions(v1)
    widened, _ = evolve_ids(v1, last, pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int64())]))
    for mode in ("BACKWARD", "BACKWARD_TRANSITIVE", "NONE"):
        check_change(versions, widened, mode)
    for mode in ("FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"):
        with pytest.raises(IncompatibleSchemaError) as error:  # version 1 cannot read a long as an int
            check_change(versions, widened, mode)
        assert error.value.field == "n" and mode in str(error.value)
    added, last2 = evolve_ids(v1, last, pa.schema([*v1, pa.field("note", pa.string())]))
    for mode in ("BACKWARD", "FORWARD", "FULL", "FULL_TRANSITIVE", "NONE"):
        check_change(versions, added, mode)
    # dropping a required field: the old version cannot read new data (FORWARD, FULL)
    dropped, _ = evolve_ids(v1, last, pa.schema([("n", pa.int32())]))
    check_change(versions, dropped, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError) as error:
        check_change(versions, dropped, "FULL")
    assert (error.value.field, error.value.rule) == ("id", "required field without a default")
    # transitive: version 1 required id; version 2 dropped it (NONE); version 3 only adds
    v3, _ = evolve_ids(dropped, max(last2, last), pa.schema([("n", pa.int32()), ("note", pa.string())]))
    history = _versions(v1, dropped)
    check_change(history, v3, "FULL")  # against the latest only
    with pytest.raises(IncompatibleSchemaError):
        check_change(history, v3, "FULL_TRANSITIVE")


def test_writer_versions_by_mode():
    versions = {v.version: v for v in _versions(*(pa.schema([(f"c{i}", pa.int64())]) for i in range(4)))}
    assert [v.version for v in writer_versions(versions, 4, "BACKWARD")] == [4, 3]
    assert [v.version for v in writer_versions(versions, 4, "FULL")] == [4, 3]
    assert [v.version for v in writer_versions(versions, 4, "FORWARD_TRANSITIVE")] == [4, 3, 2, 1]
    assert [v.version for v in writer_versions(versions, 4, "NONE")] == [4]


def test_projection_by_field_id():
    v1, last = new_topic_schema(pa.schema([("id", pa.int32()), ("name", pa.string()), ("gone", pa.string()),
                                           ("who", pa.struct([("x", pa.int32())])),
                                           ("xs", pa.list_(pa.struct([("y", pa.int32())])))]))
    v2, _ = evolve_ids(v1, last, pa.schema([
        pa.field("who", pa.struct([("x", pa.int64()), ("z", pa.string())])),
        with_field_id(pa.field("label", pa.string()), field_id(v1.field("name"))),
        pa.field("id", pa.int64()),
        with_default(pa.field("currency", pa.string(), nullable=False), "EUR"),
        pa.field("xs", pa.list_(pa.struct([("y", pa.int64()), ("w", pa.bool_())]))),
        pa.field("note", pa.string()),
    ]))
    check_change(_versions(v1), v2, "BACKWARD")
    data = pa.table({"_timestamp": [1, 2], "id": pa.array([1, None], pa.int32()), "name": ["a", "b"],
                     "gone": ["g", "h"], "who": [{"x": 7}, None], "xs": [[{"y": 1}], None]}).cast(
        pa.schema([pa.field("_timestamp", pa.int64()), *v1]))
    out = project(data, v1, v2, keep_ids=False)
    assert out.column_names == ["_timestamp", "who", "label", "id", "currency", "xs", "note"]
    assert out.to_pylist() == [
        {"_timestamp": 1, "who": {"x": 7, "z": None}, "label": "a", "id": 1, "currency": "EUR",
         "xs": [{"y": 1, "w": None}], "note": None},
        {"_timestamp": 2, "who": None, "label": "b", "id": None, "currency": "EUR", "xs": None, "note": None},
    ]
    assert out.schema.field("id").type == pa.int64() and out.schema.field("id").metadata is None
    assert field_id(project(data, v1, v2).schema.field("id")) == field_id(v1.field("id"))
    same = project(data, v1, v1)
    assert [c.chunk(0).buffers()[-1].address for c in same.columns] == [  # the same buffers: no copy
        c.chunk(0).buffers()[-1].address for c in data.columns]


def test_a_planned_projection_skips_decoding_dropped_columns_and_reads_as_project_does():
    v1, last = new_topic_schema(pa.schema([("id", pa.int32()), ("gone", pa.string()), ("name", pa.string())]))
    v2, _ = evolve_ids(v1, last, pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()),
                                            with_default(pa.field("d", pa.int64(), nullable=False), 7)]))
    data = pa.table({"_timestamp": [1, 2, 3], "id": pa.array([1, 2, 3], pa.int32()), "gone": ["x", "y", "z"],
                     "name": ["a", None, "c"]}).cast(pa.schema([pa.field("_timestamp", pa.int64()), *v1]))
    plan = Projection(v1, v2, keep_ids=False)
    assert plan.dropped == {"gone"}
    for compression in ("uncompressed", "zstd"):
        segment = encode_segment(data, compression)
        decoded = decode_segment(segment, plan.dropped)
        assert decoded.column_names == ["_timestamp", "id", "name"]  # "gone" was never decoded
        assert decode_segment(segment).column_names == data.column_names
        want = project(data, v1, v2, keep_ids=False)
        for n in (3, 1, 3):  # defaults built once, sliced to each table's length
            got = plan.apply(decoded.slice(0, n))
            assert got.schema == want.schema and got.to_pylist() == want.slice(0, n).to_pylist()
    assert Projection(v2, v2).dropped == frozenset()


def test_the_segment_cache_decodes_again_a_segment_held_without_columns_now_wanted(tmp_path):
    from txn_broker.log.partition import PlannedSegment
    from txn_broker.log.reader import SegmentCache
    from txn_broker.storage import open_store

    store = open_store(f"file://{tmp_path}")
    table = pa.table({"_timestamp": [1, 2], "id": [1, 2], "gone": ["x", "y"]})
    store.put("seg.arrow", encode_segment(table, "zstd").to_pybytes())
    segment = PlannedSegment(0, 2, 100, "seg.arrow", None, None)
    cache = SegmentCache(store)
    assert cache.get(segment, skip=frozenset({"gone"})).column_names == ["_timestamp", "id"]
    assert cache.get(segment, skip=frozenset({"gone", "id"})).column_names == ["_timestamp", "id"]  # held: enough
    assert cache.get(segment).column_names == ["_timestamp", "id", "gone"]  # wanted again: decoded again
    assert cache.get(segment, skip=frozenset({"gone"})).column_names == ["_timestamp", "id", "gone"]
    assert cache._bytes == cache.get(segment).nbytes  # the first decoding was replaced, not added


def test_a_send_in_an_older_version_is_converted_and_others_are_refused():
    v1, last = new_topic_schema(pa.schema([("id", pa.int32()), ("name", pa.string())]))
    v2, last = evolve_ids(v1, last, pa.schema([pa.field("id", pa.int64()), ("name", pa.string()),
                                               ("note", pa.string())]))
    v3, _ = evolve_ids(v2, last, pa.schema([pa.field("id", pa.int64()), ("note", pa.string())]))
    versions = {v.version: v for v in _versions(v1, v2, v3)}
    old = pa.table({"id": pa.array([1], pa.int32()), "name": ["a"]})  # version 1: int ids
    latest = conform_send(pa.table({"id": pa.array([2], pa.int64()), "note": ["n"]}), versions, 3, "BACKWARD", "t")
    assert latest.to_pylist() == [{"id": 2, "note": "n"}] and field_id(latest.schema.field("id")) == 5
    assert conform_send([{"id": 3, "name": "c"}], versions, 3, "BACKWARD", "t").to_pylist() == [
        {"id": 3, "note": None}]  # version 2 with note missing (nullable): filled
    with pytest.raises(SchemaMismatchError) as error:  # version 1 is older than BACKWARD lets writers send in
        conform_send(old, versions, 3, "BACKWARD", "t")
    assert "tried versions [3, 2]" in str(error.value)
    assert conform_send(old, versions, 3, "BACKWARD_TRANSITIVE", "t").to_pylist() == [{"id": 1, "note": None}]
    with pytest.raises(SchemaMismatchError):
        conform_send([{"id": 1, "name": "a"}], versions, 3, "NONE", "t")
    with pytest.raises(SchemaMismatchError):
        conform_send([{"id": 1, "colour": "red"}], versions, 3, "FULL_TRANSITIVE", "t")
    # rows lacking a defaulted column get its default, each on its own
    v4, _ = evolve_ids(v3, 7, pa.schema([*v3, with_default(pa.field("cur", pa.string(), nullable=False), "EUR")]))
    versions[4] = SchemaVersion(4, v4, 0, "test")
    assert conform_send([{"id": 1, "cur": "USD"}, {"id": 2}], versions, 4, "BACKWARD", "t").to_pylist() == [
        {"id": 1, "note": None, "cur": "USD"}, {"id": 2, "note": None, "cur": "EUR"}]

"""Property tests of the Python API under bad input: every malformed name, schema, record,
offset, setting or timeout gets a typed TxnBrokerError and leaves nothing half-written;
whatever is accepted round-trips exactly. fsck is clean after every property (the
``broker`` fixture). Both backends; one broker per module, a unique topic per example.
"""

from __future__ import annotations

import math
import re
import unicodedata

import pyarrow as pa
import pytest
from fuzz.conftest import unique
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import txn_broker
from txn_broker import TopicPartition
from txn_broker.errors import (
    InvalidConfigError,
    InvalidInputError,
    InvalidNameError,
    InvalidTopicNameError,
    InvalidTransactionTimeoutError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    SchemaMismatchError,
    TxnBrokerError,
    UnknownTopicOrPartitionError,
)
from txn_broker.log.segment_format import COMPRESSION_TYPES
from txn_broker.topic_configs import check_changes

pytestmark = pytest.mark.integration

FUZZ = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
INJECTIONS = [
    "x'; DROP TABLE topics; --",
    "'; DELETE FROM segments WHERE '1'='1",
    'x" OR "1"="1',
    "Robert'); DROP TABLE transactional_ids;--",
    "a; TRUNCATE txn_state_log",
    "../../etc/passwd",
    "topics/../../x",
    "%s%s%s",
    ":name",
    "{now_ms}",
    "\\x00",
    "\u202eevil",
]
names = st.one_of(st.sampled_from(INJECTIONS), st.text(max_size=300),
                  st.from_regex(r"[a-zA-Z0-9._-]{1,249}", fullmatch=True))
KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
ARROW_TYPES = [pa.int8(), pa.int64(), pa.uint32(), pa.float64(), pa.bool_(), pa.string(), pa.binary(),
               pa.large_string(), pa.timestamp("ms"), pa.date32(), pa.decimal128(10, 2),
               pa.list_(pa.int32()), pa.struct([("a", pa.int16())]), pa.map_(pa.string(), pa.binary()),
               pa.null(), pa.dictionary(pa.int8(), pa.string())]


def topic_count(broker) -> int:
    return len(broker.list_topics())


@FUZZ
@given(name=names)
@example(name="")
@example(name=".")
@example(name="..")
@example(name="a" * 250)
def test_topic_names(broker, name):
    before = set(broker.list_topics())
    valid = bool(KAFKA_TOPIC.fullmatch(name)) and name not in (".", "..") and name not in before
    try:
        broker.create_topic(name)
    except InvalidTopicNameError:
        assert not KAFKA_TOPIC.fullmatch(name) or name in (".", "..")
        assert set(broker.list_topics()) == before  # nothing written
        return
    except txn_broker.errors.TopicAlreadyExistsError:
        assert name in before
        return
    assert valid
    assert set(broker.list_topics()) == before | {name}
    assert broker.describe_topic(name).name == name
    broker.delete_topic(name)


@FUZZ
@given(tid=names, group=names)
def test_transactional_and_group_ids(broker, tid, group):
    """Any printable id is stored verbatim (bound, never spliced into SQL); others are refused."""
    ok_id = 0 < len(tid) <= 249 and not _controls(tid) and _utf8(tid)
    ok_group = 0 < len(group) <= 249 and not _controls(group) and _utf8(group)
    topic = unique()
    broker.create_topic(topic)
    try:
        producer = broker.producer(transactional_id=tid)
    except InvalidNameError:
        assert not ok_id
        return
    assert ok_id
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, [{"key": b"k", "value": b"v"}], partition=0)
    try:
        producer.send_offsets_to_transaction({TopicPartition(topic, 0): 0}, group)
    except InvalidNameError:
        assert not ok_group
        producer.abort_transaction()
        assert broker.describe_topic(topic).partitions[0].last_stable_offset == \
            broker.describe_topic(topic).partitions[0].high_watermark
        return
    assert ok_group
    producer.commit_transaction()
    assert broker.describe_transaction(tid).transactional_id == tid
    assert broker.committed_offsets(group, [TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 0}
    assert group in broker.list_groups()


def _controls(text: str) -> bool:
    """Whether ``text`` holds a Unicode control or format character or a line or paragraph
    separator (categories Cc, Cf, Zl, Zp): what ids refuse (docs/semantics.md)."""
    return any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@st.composite
def schemas(draw):
    fields = draw(st.lists(st.tuples(st.one_of(st.text(max_size=20), st.sampled_from(["_offset", "key", ""])),
                                     st.sampled_from(ARROW_TYPES), st.booleans()), max_size=6))
    if not draw(st.booleans()):
        return draw(st.sampled_from([None, "not a schema", {"key": "binary"}, 42]))
    return pa.schema([pa.field(n, t, nullable=nullable or t == pa.null()) for n, t, nullable in fields])


@FUZZ
@given(schema=schemas())
def test_schemas(broker, schema):
    topic = unique()
    try:
        broker.create_topic(topic, schema=schema)
    except SchemaMismatchError:
        assert topic not in broker.list_topics()
        return
    stored = broker.describe_topic(topic).schema
    if schema is not None:
        assert stored.equals(schema.remove_metadata())
        assert len(set(schema.names)) == len(schema.names) and all(n and not n.startswith("_") for n in schema.names)


records = st.lists(st.fixed_dictionaries({}, optional={
    "key": st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=5), st.integers()),
    "value": st.one_of(st.none(), st.binary(max_size=200), st.just(b"\xff\xfe\x80 not utf-8"), st.floats()),
    "headers": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=3)),
    "extra": st.integers(),
}), max_size=30)


class Refused(Exception):
    pass


def as_binary(value):
    """What the default schema stores for a key or value, or Refused."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise Refused from None
    raise Refused


@FUZZ
@given(rows=records, keyed=st.booleans())
@example(rows=[{"key": None, "value": b"null key"}] * 3, keyed=True)
@example(rows=[{"key": "\udc80"}], keyed=False)
def test_records_against_the_default_schema(broker, rows, keyed):
    topic = unique()
    broker.create_topic(topic, partitions=3)
    try:
        expected = sorted(((as_binary(r.get("key")), as_binary(r.get("value"))) for r in rows), key=repr)
        refused = any("extra" in r for r in rows)
    except Refused:
        refused = True
    producer = broker.producer()
    try:
        producer.send(topic, rows, key="key" if keyed else None)
    except SchemaMismatchError:
        assert refused, rows
        producer.close()
        assert sum(p.high_watermark for p in broker.describe_topic(topic).partitions) == 0
        return
    assert not refused, rows
    producer.close()  # flushes
    consumer = broker.consumer()
    consumer.subscribe([topic])
    got = consumer.poll(max_records=1000).to_pylist()
    assert sorted(((r["key"], r["value"]) for r in got), key=repr) == expected, "each record once, byte for byte"
    if keyed:
        by_key = {}
        for r in got:
            if r["key"] is not None:
                assert by_key.setdefault(r["key"], r["_partition"]) == r["_partition"]


@FUZZ
@given(n=st.sampled_from([0, 1, 5000]), text=st.text(max_size=10))
def test_empty_huge_and_unencodable_batches(broker, n, text):
    topic = unique()
    broker.create_topic(topic, schema=pa.schema([("name", pa.string()), ("n", pa.int64())]),
                        config={"max.message.bytes": 64})
    producer = broker.producer()
    try:
        producer.send(topic, [{"name": text * 3, "n": i} for i in range(n)], partition=0)
    except SchemaMismatchError:
        assert not _utf8(text) and n > 0  # a lone surrogate cannot be stored as a string
    except RecordTooLargeError:
        assert len((text * 3).encode("utf-8", "surrogatepass")) + 8 > 64
    producer.close()
    hw = broker.describe_topic(topic).partitions[0].high_watermark
    assert hw in (0, n)
    with pytest.raises(SchemaMismatchError):
        producer2 = broker.producer()
        producer2.send(topic, pa.table({"name": ["x"], "n": pa.array([1], pa.int32())}), partition=0)
    assert broker.describe_topic(topic).partitions[0].high_watermark == hw


@FUZZ
@given(evolved=schemas())
def test_schema_evolution_that_would_break_readers_is_refused(broker, evolved):
    """A table with another schema than the topic's is refused, never written with it."""
    assume(isinstance(evolved, pa.Schema))
    topic = unique()
    base = pa.schema([("id", pa.int64()), ("name", pa.string())])
    broker.create_topic(topic, schema=base)
    table = pa.Table.from_pylist([], schema=evolved) if len(evolved) else pa.table({})
    producer = broker.producer()
    try:
        producer.send(topic, table, partition=0)
    except SchemaMismatchError:
        pass
    else:
        assert table.num_rows == 0 or evolved.equals(base)
    producer.close()
    assert broker.describe_topic(topic).schema.equals(base)


offsets = st.one_of(st.integers(min_value=-2**70, max_value=2**70), st.sampled_from([True, None, 1.5, "3", math.nan]))


@FUZZ
@given(offset=offsets, partition=st.one_of(st.integers(-3, 5), st.sampled_from([None, "0", 1.0, False])))
def test_offsets_out_of_range(broker, offset, partition):
    topic = unique()
    broker.create_topic(topic, partitions=2)
    producer = broker.producer()
    producer.send(topic, [{"key": b"k", "value": b"v"}] * 3, partition=0)
    producer.close()
    valid_partition = isinstance(partition, int) and not isinstance(partition, bool) and 0 <= partition < 2
    hw = 3 if partition == 0 else 0
    is_int = isinstance(offset, int) and not isinstance(offset, bool)
    valid_offset = is_int and 0 <= offset <= hw
    tp = TopicPartition(topic, partition)
    try:
        broker.commit_offsets("g-" + topic, {tp: offset})
    except UnknownTopicOrPartitionError:
        assert not valid_partition
    except OffsetOutOfRangeError:
        assert valid_partition and is_int and not valid_offset
    except InvalidInputError:  # not an offset at all
        assert valid_partition and not is_int
    else:
        assert valid_partition and valid_offset
        assert broker.committed_offsets("g-" + topic, [tp]) == {tp: offset}
    if not (valid_partition and valid_offset):
        assert "g-" + topic not in broker.list_groups()
    tx = broker.producer(transactional_id="t-" + topic)
    tx.init_transactions()
    tx.begin_transaction()
    try:
        tx.send_offsets_to_transaction({tp: offset}, "h-" + topic)
    except InvalidInputError:  # an unknown partition, an offset out of range or not an int
        assert not (valid_partition and valid_offset)
    tx.commit_transaction()
    consumer = broker.consumer()
    if valid_partition:
        consumer.assign([tp])
        try:
            consumer.seek(tp, offset)
        except OffsetOutOfRangeError:
            assert is_int and not valid_offset
        except InvalidInputError:
            assert not is_int
        else:
            assert valid_offset and consumer.position(tp) == offset


POSITIVE_SETTINGS = {"max_transaction_timeout_ms", "segment_bytes", "max_message_bytes", "upload_threads",
                     "pool_size"}


@FUZZ
@given(settings_=st.dictionaries(st.sampled_from(["max_transaction_timeout_ms", "segment_bytes", "pool_size",
                                                  "upload_threads", "nope", "max_message_bytes",
                                                  "complete_prepared_grace_ms"]),
                                 st.one_of(st.integers(-5, 10**7), st.sampled_from([None, "100", 1.5, True, 0])),
                                 max_size=3))
def test_broker_settings(broker, settings_, tmp_path_factory):
    valid = "nope" not in settings_ and all(
        isinstance(v, int) and not isinstance(v, bool) and (v > 0 if k in POSITIVE_SETTINGS else v >= 0)
        for k, v in settings_.items())
    root = tmp_path_factory.mktemp("settings")
    try:
        other = txn_broker.connect(f"sqlite:///{root}/b.db", (root / "s").as_uri(), **settings_)
    except InvalidConfigError:
        assert not valid, settings_
        return
    assert valid, settings_
    other.close()


@FUZZ
@given(timeout=st.one_of(st.integers(-10, 10**7), st.sampled_from([None, 1.5, "60000", True, math.inf])),
       poll_timeout=st.one_of(st.floats(max_value=0.05), st.sampled_from([math.nan, "1", None, -1, True])),
       max_records=st.one_of(st.integers(-2, 3), st.sampled_from([None, 1.5, "5", True])))
@example(timeout=60_000, poll_timeout=math.nan, max_records=1)  # used to wait forever
@example(timeout=0, poll_timeout=0.0, max_records=None)  # no record cap: sized in bytes
@example(timeout=None, poll_timeout=0.0, max_records=1)  # the default timeout
def test_timeouts_and_poll_arguments(broker, timeout, poll_timeout, max_records):
    # None: the broker's default (Settings.transaction_timeout_ms)
    valid_timeout = timeout is None or (isinstance(timeout, int) and not isinstance(timeout, bool)
                                        and 0 < timeout <= 900_000)
    try:
        producer = broker.producer(transactional_id="timeouts", transaction_timeout_ms=timeout)
        producer.init_transactions()
    except InvalidTransactionTimeoutError:
        assert not valid_timeout
    else:
        assert valid_timeout
    topic = unique()
    broker.create_topic(topic)
    consumer = broker.consumer()
    consumer.assign([TopicPartition(topic, 0)])
    valid_wait = isinstance(poll_timeout, int | float) and not isinstance(poll_timeout, bool) \
        and not math.isnan(poll_timeout) and poll_timeout >= 0
    # None: no record cap (the poll is sized in bytes)
    valid_max = max_records is None or (isinstance(max_records, int) and not isinstance(max_records, bool)
                                        and max_records > 0)
    try:
        table = consumer.poll(max_records=max_records, timeout_s=poll_timeout)
    except InvalidConfigError:
        assert not (valid_wait and valid_max)
        return
    assert valid_wait and valid_max and table.num_rows == 0


@FUZZ
@given(config=st.one_of(st.dictionaries(st.sampled_from(["retention.ms", "retention.bytes", "max.message.bytes",
                                                         "compression.type", "cleanup.policy", ""]),
                                        st.one_of(st.integers(-3, 10**12), st.text(max_size=6), st.none(),
                                                  st.sampled_from(["lz4", "zstd", "none", "gzip"])),
                                        max_size=3),
                        st.sampled_from([[], "retention.ms=5", 7])),
       partitions=st.one_of(st.integers(-1, 5), st.sampled_from([10_001, 2.0, "3", None, True])))
def test_topic_configs_and_partition_counts(broker, config, partitions):
    topic = unique()
    try:
        broker.create_topic(topic, partitions=partitions, config=config)
    except TxnBrokerError as error:
        assert isinstance(error, InvalidConfigError), type(error)
        assert topic not in broker.list_topics()
        return
    described = broker.describe_topic(topic)
    assert len(described.partitions) == partitions
    sizes = ("retention.ms", "retention.bytes", "max.message.bytes", "segment.bytes")
    assert all(described.config[k] == -1 or described.config[k] > 0 for k in sizes)
    assert check_changes(described.config) == described.config  # every stored value is a valid one
    assert described.config["compression.type"] in COMPRESSION_TYPES

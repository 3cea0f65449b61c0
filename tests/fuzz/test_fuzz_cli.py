"""Property tests of the ``txn-broker`` CLI under bad arguments and bad files.

Every run ends with exit code 0, 1 or 2 and one clear ``error:`` line, never a traceback
nor an "unexpected" error; malformed input (arguments, names, schemas, record files,
offsets) is refused with :data:`BAD_INPUT` (argparse's usage errors exit 2, the broker's
typed InvalidInputError exits 1 with its message: docs/reliability.md explains the
choice left to the CLI); a refused command leaves nothing half-written, and
fsck is clean after every property (the ``broker`` fixture). The CLI runs in-process
(``txn_broker.cli.main.main``) against the module's broker, on both backends.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile

import pytest
from fuzz.conftest import unique
from fuzz.test_fuzz_api import FUZZ, INJECTIONS
from hypothesis import example, given, settings
from hypothesis import strategies as st

from txn_broker import TopicPartition

pytestmark = pytest.mark.integration
#: exit codes of refused bad input: 2 usage error, 1 a typed InvalidInputError ("error: ...")
BAD_INPUT = (2,)  # malformed input: exit 2, nothing written


def run_cli(broker, *args: str) -> tuple[int, str, str]:
    from txn_broker.cli.main import main

    url = broker._db.url.render_as_string(hide_password=False)
    argv = ["--database-url", url, "--storage-url", broker._store.url, *args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    stderr = err.getvalue()
    lines = [ln for ln in stderr.split("\n") if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert not any(ln.startswith("error: unexpected ") for ln in lines), stderr  # an untyped error
    if code:
        assert lines and any("error: " in ln for ln in lines[-2:]), (args, code, stderr)  # says why
        if code == 1:
            assert len(lines) == 1, stderr
    return code, out.getvalue(), stderr


def visible(broker, topic: str) -> int:
    consumer = broker.consumer()
    consumer.subscribe([topic])
    n = 0
    while batch := consumer.poll(max_records=10_000).num_rows:
        n += batch
    return n


tokens = st.one_of(st.sampled_from(INJECTIONS), st.text(max_size=12),
                   st.sampled_from(["--partitions", "--schema", "--to-offset", "--group", "--file", "-1", "0",
                                    "99999999999999999999", "--json", "--format", "jsonl", "--topic", "--key",
                                    "--transactional-id", "--config", "retention.ms=-5", "x=y", "--max-records"]))
commands = st.sampled_from([["topics", "create"], ["topics", "describe"], ["topics", "delete"], ["topics", "list"],
                            ["produce"], ["consume"], ["groups", "describe"], ["groups", "reset-offsets"],
                            ["transactions", "describe"], ["transactions", "abort"], ["transactions", "list"],
                            ["nonsense"], []])


CLI_FUZZ = settings(FUZZ, max_examples=25)


@CLI_FUZZ
@given(command=commands, extra=st.lists(tokens, max_size=5))
def test_any_arguments(broker, command, extra):
    extra = [t for t in extra if "\x00" not in t]  # a NUL cannot be passed in a real argv
    before = set(broker.list_topics())
    code, _out, stderr = run_cli(broker, *command, *extra)
    assert code in (0, 1, 2), (command, extra, code, stderr)
    if code:
        assert set(broker.list_topics()) == before, "a refused command created or deleted a topic"


@CLI_FUZZ
@given(name=st.one_of(st.sampled_from(INJECTIONS), st.text(min_size=1, max_size=60)),
       spec=st.one_of(st.just("key:binary,value:binary"), st.text(max_size=30),
                      st.sampled_from(["a:int64", "a:int64,a:int64", "_x:int64", "a:nosuchtype", "a:",
                                       "a:decimal(5,2)", "a:list<int32>", "a:timestamp[ms]", ""])))
def test_topic_names_and_schemas(broker, name, spec):
    name, spec = name.replace("\x00", ""), spec.replace("\x00", "")
    before = set(broker.list_topics())
    code, _out, stderr = run_cli(broker, "topics", "create", name, "--partitions", "2", "--schema", spec)
    if code == 0:
        assert set(broker.list_topics()) == before | {name}
        broker.delete_topic(name)
    else:
        assert code in BAD_INPUT, (name, spec, stderr)
        assert set(broker.list_topics()) == before


lines = st.one_of(
    st.builds(lambda k, v: json.dumps({"key": k, "value": v}), st.sampled_from(["a2V5", "", "!!notbase64", None]),
              st.sampled_from(["dmFsdWU=", None, 5, "ñ"])),
    st.text(max_size=30),
    st.sampled_from(['{"key": "a2V5", "nope": 1}', "[1, 2]", "null", '{"value": {"x": 1}}', "{", "\ufeff{}"]),
)


@CLI_FUZZ
@given(rows=st.lists(lines, max_size=8), raw=st.binary(max_size=64), fmt=st.sampled_from(["jsonl", "csv", "parquet"]),
       use_raw=st.booleans())
@example(rows=[], raw=b"\xff\xfe\x00garbage", fmt="parquet", use_raw=True)
@example(rows=[], raw=b"", fmt="jsonl", use_raw=True)
@example(rows=[], raw=b"\x80\n", fmt="csv", use_raw=True)  # a CSV header that is not UTF-8
@example(rows=['{"key": "a2V5", "value": "dmFsdWU="}', "{"], raw=b"", fmt="jsonl", use_raw=False)
def test_malformed_record_files(broker, rows, raw, fmt, use_raw):
    """With --transactional-id the file lands whole or not at all."""
    topic = unique("cli")
    broker.create_topic(topic, partitions=2)
    data = raw if use_raw else "\n".join(rows).encode("utf-8", "surrogatepass")
    with tempfile.NamedTemporaryFile(suffix="." + fmt, delete=False) as f:
        f.write(data)
    try:
        code, _out, stderr = run_cli(broker, "produce", topic, "--file", f.name, "--format", fmt,
                                     "--transactional-id", "fuzz-" + topic)
    finally:
        os.unlink(f.name)
    n = visible(broker, topic)
    if code == 0:
        assert n == sum(1 for line in data.splitlines() if line.strip()) or fmt != "jsonl", (n, data)
    else:
        assert code in BAD_INPUT, (fmt, data, stderr)
        assert n == 0, "a refused file must leave nothing visible"
        desc = broker.describe_topic(topic)
        assert all(p.last_stable_offset == p.high_watermark for p in desc.partitions), "no hanging transaction"


@CLI_FUZZ
@given(offset=st.one_of(st.integers(-5, 2**70), st.sampled_from(["x", "1.5", "", "0x10"])),
       dry_run=st.booleans())
def test_reset_offsets(broker, offset, dry_run):
    topic = unique("cli")
    broker.create_topic(topic, partitions=1)
    producer = broker.producer()
    producer.send(topic, [{"key": b"k", "value": b"v"}] * 3, partition=0)
    producer.close()
    group = "cli-" + topic
    broker.commit_offsets(group, {TopicPartition(topic, 0): 1})
    args = ["groups", "reset-offsets", group, "--topic", topic, "--to-offset", str(offset)]
    code, _out, stderr = run_cli(broker, *args, *(["--dry-run"] if dry_run else []))
    committed = broker.committed_offsets(group, [TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    if code == 0:
        assert isinstance(offset, int) and 0 <= offset <= 3
        assert committed == (1 if dry_run else offset)
    else:
        assert code in BAD_INPUT, (offset, stderr)
        assert committed == 1, "a refused reset changes nothing"

"""The shared rewrite planner (txn_broker/rewrite.py): runs of consecutive small files
grouped toward a target size, at least two inputs, files near the target, files that may
not move and offset gaps ending a run; the executor's steps in order, and a refused swap
discarding its output."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txn_broker.errors import InvalidConfigError
from txn_broker.rewrite import RewriteFile, RewriteGroup, plan_rewrite, run_rewrite


def files(*sizes: int, movable: tuple[int, ...] = ()) -> list[RewriteFile]:
    out, start = [], 0
    for i, size in enumerate(sizes):
        out.append(RewriteFile(f"f{i}", start, start + 10, size, movable=i not in movable))
        start += 10
    return out


def keys(groups: list[RewriteGroup]) -> list[list[str]]:
    return [g.keys for g in groups]


def test_small_files_are_packed_toward_the_target():
    assert keys(plan_rewrite(files(10, 10, 10, 10, 10), 30)) == [["f0", "f1", "f2"], ["f3", "f4"]]
    assert keys(plan_rewrite(files(10, 25, 10), 30)) == []  # 10+25 > 30, 25+10 > 30: nothing pairs
    assert keys(plan_rewrite(files(10), 100)) == []  # one file: nothing to merge


def test_near_target_files_unmovable_files_and_gaps_end_runs():
    assert keys(plan_rewrite(files(10, 10, 80, 10, 10), 100)) == [["f0", "f1"], ["f3", "f4"]]
    assert keys(plan_rewrite(files(10, 10, 10, 10, movable=(2,)), 100)) == [["f0", "f1"]]
    gap = [RewriteFile("a", 0, 10, 5), RewriteFile("b", 10, 20, 5), RewriteFile("c", 25, 30, 5),
           RewriteFile("d", 30, 40, 5)]
    groups = plan_rewrite(gap, 100)
    assert keys(groups) == [["a", "b"], ["c", "d"]]
    assert (groups[0].start, groups[0].end, groups[0].size) == (0, 20, 10)


def test_files_bringing_no_bytes_join_but_never_make_a_group_alone():
    assert keys(plan_rewrite(files(0, 0, 0), 100)) == []
    assert keys(plan_rewrite(files(0, 50, 0, 0, 50, 0), 100)) == [["f0", "f1", "f2", "f3", "f4", "f5"]]
    assert keys(plan_rewrite(files(*[1] * 7), 100, max_inputs=3)) == [["f0", "f1", "f2"], ["f3", "f4", "f5"]]


def test_a_target_must_be_positive():
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidConfigError):
            plan_rewrite(files(1, 1), bad)  # type: ignore[arg-type]


class Recorder:
    """A rewrite target keeping what the executor asked of it."""

    def __init__(self, swaps: bool) -> None:
        self.swaps, self.steps = swaps, []

    def read(self, group):
        self.steps.append("read")
        return [pa.table({"x": [1, 2]}), pa.table({"x": pa.array([], pa.int64())})]

    def write(self, group, tables):
        self.steps.append(("write", sum(t.num_rows for t in tables), len(tables)))
        return "out"

    def swap(self, group, output):
        self.steps.append(("swap", output))
        return self.swaps

    def discard(self, output):
        self.steps.append(("discard", output))


def test_the_executor_reads_writes_swaps_and_discards_a_refused_output():
    group = plan_rewrite(files(1, 1), 10)[0]
    done = Recorder(swaps=True)
    result = run_rewrite(done, group)
    assert result.swapped and not result.conflict and result.rows == 2 and result.output == "out"
    assert done.steps == ["read", ("write", 2, 1), ("swap", "out")]
    refused = Recorder(swaps=False)
    result = run_rewrite(refused, group)
    assert result.conflict and not result.swapped
    assert refused.steps[-1] == ("discard", "out")


def test_a_merged_segment_is_compressed_as_its_records_would_be():
    """The ``_offset`` column of a compacted segment always compresses; left out of the
    sample, incompressible records stay uncompressed (read without a copy)."""
    import numpy as np

    from txn_broker.log.segment_format import OFFSET_COLUMN, TIMESTAMP_TYPE, encode_segment

    n = 20_000
    rng = np.random.default_rng(1)
    table = pa.table({
        OFFSET_COLUMN: pa.array(np.arange(n, dtype=np.int64) * 2),
        "_timestamp": pa.array(np.full(n, 1_700_000_000_000), TIMESTAMP_TYPE),
        "value": pa.array([rng.bytes(84) for _ in range(n)], pa.binary()),
    })
    plain = encode_segment(table, "uncompressed").size
    assert encode_segment(table, "zstd").size < plain  # the offsets and timestamps tip the sample
    assert encode_segment(table, "zstd", sample_without=(OFFSET_COLUMN,)).size == plain


def test_a_small_segment_is_sized_by_what_it_brings_to_a_merged_one():
    """A segment's per-object overhead (IPC framing, the schema twice, a batch's metadata)
    is paid once by a merged segment: compaction sizes an input by its stored bytes less
    that overhead, plus the `_offset` column it gains; an aborted input brings nothing."""
    from txn_broker.compaction import Candidate, merged_bytes
    from txn_broker.log.segment_format import encode_segment, segment_overhead, with_timestamp

    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    for records in (1, 10, 1000):
        table = with_timestamp(pa.table({"key": [b"k"] * records, "value": [b"v" * 100] * records}, schema=schema), 0)
        for compression in ("uncompressed", "zstd"):
            stored = encode_segment(table, compression).size
            overhead = segment_overhead(schema, compression)
            assert 0 < stored - overhead <= table.nbytes + 8 * table.num_columns * 3  # buffers and their padding
    stored = encode_segment(with_timestamp(pa.table({"key": [b"k"] * 10, "value": [b"v" * 100] * 10},
                                                    schema=schema), 0)).size
    overhead = segment_overhead(schema)
    assert overhead > stored / 3  # 10 records of 100 B: the object is mostly overhead

    def candidate(committed: bool, row_count: int | None = None) -> Candidate:
        return Candidate(0, 10, stored, "k", 0, purged=False, row_count=row_count, committed=committed,
                         aborted=not committed)

    assert merged_bytes(candidate(True), overhead) == stored - overhead + 8 * 10
    assert merged_bytes(candidate(True, row_count=10), overhead) == stored - overhead  # `_offset` stored already
    assert merged_bytes(candidate(False), overhead) == 0

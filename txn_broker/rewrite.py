"""Rewriting runs of small files into files of about a target size: one planner and one
executor, shared by segment compaction (:mod:`txn_broker.compaction`) and the Iceberg
publisher's small-file rewrite.

**Planning.** :func:`plan_rewrite` takes one partition's files in offset order, each a
:class:`RewriteFile` (its key, the offsets ``[start, end)`` it covers, the bytes it brings
to a merged output, and whether it may be merged at all), and a target size. It answers
:class:`RewriteGroup` values: runs of consecutive files (each starting where the previous
ends) to merge into one output of about the target, with at least two inputs. A file of at
least ``near_target`` times the target is left alone, as is a file that may not be merged
(``movable=False``: too young, in an open transaction, ...); either ends a run, as does a
gap between two files' offsets. Files are packed greedily in offset order: a group closes
when the next file would take it past the target. A file that brings no bytes (segment
compaction: an aborted segment, whose records the output drops) joins any group.

**Executing.** :func:`run_rewrite` runs one group against a :class:`RewriteTarget`, the
part that knows the file kind:

1. ``read(group)``: the rows the output keeps, as Arrow tables in offset order (segment
   compaction: each input's committed records, with their offsets);
2. ``write(group, tables)``: one output object, written where no reader looks yet (an
   unregistered segment object, an Iceberg data file not in any snapshot); returns a
   handle of the caller's choosing;
3. ``swap(group, output)``: make the output replace the inputs in one atomic step that
   first checks the inputs are unchanged (segments: one database transaction, a
   compare-and-set on the partition's segment rows, the inputs' objects queued in
   ``object_deletions``; Iceberg: a replace snapshot whose commit fails if the files it
   replaces were changed). True: swapped. False: the inputs changed (a concurrent
   retention, purge or second rewrite); nothing was changed;
4. ``discard(output)``: the swap was refused: remove the output (no reader knows it).

The inputs' objects are never deleted by the rewrite itself: readers that planned before
the swap keep reading them, and gc deletes them after its delay. A crash before the swap
leaves only an unreferenced output (an orphan: gc deletes it after its grace period); a
crash after it leaves the inputs queued. Fault points ``rewrite.before_swap`` and
``rewrite.after_swap`` (:mod:`txn_broker.faults`) let tests crash between the steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import pyarrow as pa

from .errors import InvalidConfigError
from .faults import fault_point

#: a file at or above this share of the target is left as it is
NEAR_TARGET = 0.75
#: the most inputs one group merges (keeps a swap's transaction bounded)
MAX_INPUTS = 5000


@dataclass(frozen=True)
class RewriteFile:
    """One file of a partition, as the planner sees it."""

    key: str
    #: the offsets it covers, ``[start, end)``
    start: int
    end: int
    #: bytes it brings to a merged output (0: nothing kept, e.g. an aborted segment)
    size: int
    #: False: never merged (and a run of files to merge stops at it)
    movable: bool = True


@dataclass(frozen=True)
class RewriteGroup:
    """Consecutive files to merge into one output."""

    files: tuple[RewriteFile, ...]

    @property
    def start(self) -> int:
        return self.files[0].start

    @property
    def end(self) -> int:
        return self.files[-1].end

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def keys(self) -> list[str]:
        return [f.key for f in self.files]


def plan_rewrite(files: Sequence[RewriteFile], target_bytes: int, *, near_target: float = NEAR_TARGET,
                 max_inputs: int = MAX_INPUTS) -> list[RewriteGroup]:
    """The groups to merge among ``files`` (one partition's, in offset order): see the
    module docstring. InvalidConfigError for a target that is not positive."""
    if not isinstance(target_bytes, int) or isinstance(target_bytes, bool) or target_bytes <= 0:
        raise InvalidConfigError(f"a rewrite's target size must be a positive number of bytes, got {target_bytes!r}")
    groups: list[RewriteGroup] = []
    run: list[RewriteFile] = []
    run_bytes = 0

    def close() -> None:
        nonlocal run, run_bytes
        if len(run) >= 2 and any(f.size for f in run):
            groups.append(RewriteGroup(tuple(run)))
        run, run_bytes = [], 0

    for f in files:
        if not f.movable or f.size >= near_target * target_bytes:
            close()
            continue
        if run and (f.start != run[-1].end or run_bytes + f.size > target_bytes or len(run) >= max_inputs):
            close()
        run.append(f)
        run_bytes += f.size
    close()
    return groups


Output = TypeVar("Output")


class RewriteTarget(Protocol[Output]):
    """What one kind of file provides to :func:`run_rewrite` (module docstring)."""

    def read(self, group: RewriteGroup) -> Iterable[pa.Table]: ...

    def write(self, group: RewriteGroup, tables: list[pa.Table]) -> Output: ...

    def swap(self, group: RewriteGroup, output: Output) -> bool: ...

    def discard(self, output: Output) -> None: ...


@dataclass(frozen=True)
class RewriteResult(Generic[Output]):
    """What became of one group: ``swapped`` (the output replaced the inputs), or not
    (``conflict``: the inputs changed meanwhile; else nothing to keep: no rows)."""

    group: RewriteGroup
    swapped: bool
    conflict: bool
    rows: int
    output: Output | None = None


def run_rewrite(target: RewriteTarget[Output], group: RewriteGroup) -> RewriteResult[Output]:
    """Read, write, swap one group (module docstring). Errors of any step propagate: what
    was written and not swapped is left for gc as an orphan."""
    tables = [t for t in target.read(group) if t.num_rows]
    rows = sum(t.num_rows for t in tables)
    if not rows:
        return RewriteResult(group, swapped=False, conflict=False, rows=0)
    output = target.write(group, tables)
    fault_point("rewrite.before_swap")
    if not target.swap(group, output):
        target.discard(output)
        return RewriteResult(group, swapped=False, conflict=True, rows=rows, output=output)
    fault_point("rewrite.after_swap")
    return RewriteResult(group, swapped=True, conflict=False, rows=rows, output=output)

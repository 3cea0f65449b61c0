"""The anomaly checker: reads a history of sends, transactions and polls, plus final reads
of every partition, and counts every anomaly class of docs/semantics.md, "How correctness is checked".

A pure module (no broker import): the chaos runner feeds it what its client processes
wrote, and ``tests/chaos/test_checker.py`` feeds it hand-made histories containing each
anomaly, so it is known to find them.

History: one JSON object per line (see ``history.py`` for the writer).

* ``{"type": "invoke", "f": "txn", "id", "process", "kind", "writes": [[topic, partition,
  value, amount]...], "reads": [[topic, partition, offset, value]...], "offsets": [[group,
  topic, partition, offset]...]}`` then ``ok`` (``"sent": [[topic, partition, offset,
  value]...]``), ``fail`` (the transaction was certainly aborted) or ``info`` (unknown). An
  invocation without a completion (the process was killed) is unknown too: it may have
  committed or aborted, but atomically.
* ``{"type": "invoke", "f": "send", ...}`` the same for a plain (idempotent) send.
* ``{"type": "ok", "f": "assign", "session", "isolation", "positions": [[t, p, pos]...]}``
  then ``{"type": "ok", "f": "poll", "session", "isolation", "records": [[t, p, o, v]...]}``.
* ``{"type": "ok", "f": "final", "topic", "partition", "hw", "lso", "rc": [[o, v]...],
  "ru": [[o, v]...]}``: read after every client stopped and the sweeps ran.
* ``{"type": "ok", "f": "final-group", "group", "offsets": [[t, p, offset]...]}``.
* ``{"type": "meta", "copy": [{"input", "output", "group", "suffix"}...]}``: copier pairs.

Anomaly classes (all must be zero for a run to pass):

* ``aborted_read``: a read_committed read returned a record of an aborted or never
  committed transaction (also: a transaction we aborted is visible at the end);
* ``lost_write``: an acknowledged write is missing from the final read of its partition;
* ``duplicate``: one value at two offsets;
* ``torn_transaction``: some but not all of a transaction is visible (at the end, to a
  reader that read past it, or its group offsets without its records), or transfers do
  not sum to zero;
* ``inconsistent_offsets``: two observations disagree on the record at one offset;
* ``nonmonotonic_send`` / ``nonmonotonic_poll``: offsets went backwards, or a reader
  skipped a record it should have returned;
* ``g0`` / ``g1c``: cycles of write-write (G0) or write-write and write-read (G1c)
  dependencies between transactions, with offsets as each partition's version order;
* ``stuck_consumer``: a partition's last stable offset is below its high watermark
  after all producers stopped and the sweeps ran;
* ``phantom_read``: a record no client ever wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ANOMALIES = (
    "aborted_read",
    "lost_write",
    "duplicate",
    "torn_transaction",
    "inconsistent_offsets",
    "nonmonotonic_send",
    "nonmonotonic_poll",
    "g0",
    "g1c",
    "stuck_consumer",
    "phantom_read",
)
READ_COMMITTED = "read_committed"
EXAMPLES = 5  # examples kept per anomaly class

TP = tuple[str, int]


@dataclass
class Op:
    """One write operation: a transaction or a plain send."""

    id: str
    f: str
    process: str
    kind: str
    writes: list[tuple[str, int, str]]
    amounts: dict[str, int]
    reads: list[tuple[str, int, int, str]]
    offsets: list[tuple[str, str, int, int]]
    status: str = "unknown"  # ok | fail | unknown
    sent: list[tuple[str, int, int, str]] = field(default_factory=list)
    error: str | None = None


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    examples: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    stats: dict[str, Any] = field(default_factory=dict)

    def add(self, anomaly: str, example: Any, n: int = 1) -> None:
        self.counts[anomaly] += n
        if len(self.examples[anomaly]) < EXAMPLES:
            self.examples[anomaly].append(example)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "anomalies": self.counts, "examples": dict(self.examples), "stats": self.stats}


def read_history(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every JSON line of the given files; a torn last line (a killed writer) is skipped."""
    events = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def _ops(events: list[dict[str, Any]]) -> dict[str, Op]:
    ops: dict[str, Op] = {}
    writes = [e for e in events if e.get("f") in ("txn", "send")]
    for e in sorted(writes, key=lambda e: e["type"] != "invoke"):  # invocations first
        if e["type"] == "invoke":
            writes = [(w[0], int(w[1]), str(w[2])) for w in e.get("writes", [])]
            amounts = {str(w[2]): int(w[3]) for w in e.get("writes", []) if len(w) > 3 and w[3] is not None}
            ops[e["id"]] = Op(
                e["id"], e["f"], e.get("process", "?"), e.get("kind", e["f"]), writes, amounts,
                [(r[0], int(r[1]), int(r[2]), str(r[3])) for r in e.get("reads", [])],
                [(o[0], o[1], int(o[2]), int(o[3])) for o in e.get("offsets", [])],
            )
        elif e["id"] in ops:
            op = ops[e["id"]]
            op.status = {"ok": "ok", "fail": "fail"}.get(e["type"], "unknown")
            op.sent = [(s[0], int(s[1]), int(s[2]), str(s[3])) for s in e.get("sent", [])]
            op.error = e.get("error")
    return ops


def check(events: list[dict[str, Any]]) -> Report:
    """Count every anomaly in ``events`` (a whole history, final reads included)."""
    report = Report()
    ops = _ops(events)
    writer: dict[str, Op] = {}  # value -> the op that wrote it
    for op in ops.values():
        for _t, _p, v in op.writes:
            writer[v] = op
    finals = [e for e in events if e.get("f") == "final"]
    groups = {e["group"]: {(t, int(p)): int(o) for t, p, o in e["offsets"]}
              for e in events if e.get("f") == "final-group"}
    copies = [c for e in events if e.get("type") == "meta" for c in e.get("copy", [])]
    polls = [e for e in events if e.get("f") == "poll"]
    assigns = {e["session"]: e for e in events if e.get("f") == "assign"}

    # -- the final state: what is committed, where each value is ------------------------
    final_rc: dict[TP, list[tuple[int, str]]] = {}
    final_ru: dict[TP, list[tuple[int, str]]] = {}
    for e in finals:
        tp = (e["topic"], int(e["partition"]))
        final_rc[tp] = [(int(o), str(v)) for o, v in e["rc"]]
        final_ru[tp] = [(int(o), str(v)) for o, v in e["ru"]]
        if int(e["lso"]) < int(e["hw"]):
            report.add("stuck_consumer", {"partition": tp, "lso": e["lso"], "hw": e["hw"]})
    committed = {v for rows in final_rc.values() for _o, v in rows}
    present = {v for rows in final_ru.values() for _o, v in rows}
    final_offset_rc = {(tp, o): v for tp, rows in final_rc.items() for o, v in rows}
    final_offset_ru = {(tp, o): v for tp, rows in final_ru.items() for o, v in rows}
    rc_place = {v: (tp, o) for (tp, o), v in final_offset_rc.items()}
    high_watermarks = {(e["topic"], int(e["partition"])): int(e["hw"]) for e in finals}

    # -- inconsistent offsets and duplicates over every observation ----------------------
    at: dict[tuple[str, int, int], str] = {}
    where: dict[str, set[tuple[str, int, int]]] = defaultdict(set)

    def observe(t: str, p: int, o: int, v: str, source: str) -> None:
        key = (t, int(p), int(o))
        seen = at.setdefault(key, v)
        if seen != v:
            report.add("inconsistent_offsets", {"offset": key, "values": [seen, v], "source": source})
            at[key] = v  # count each later disagreement once more
        where[v].add(key)

    for op in ops.values():
        for t, p, o, v in op.sent:
            observe(t, p, o, v, f"ack of {op.id}")
    for e in polls:
        for t, p, o, v in e["records"]:
            observe(t, int(p), int(o), str(v), f"poll {e.get('session')}")
    for tp, rows in final_ru.items():
        for o, v in rows:
            observe(tp[0], tp[1], o, v, "final read_uncommitted")
    for tp, rows in final_rc.items():
        for o, v in rows:
            observe(tp[0], tp[1], o, v, "final read_committed")
    for v, places in where.items():
        if len(places) > 1:
            report.add("duplicate", {"value": v, "at": sorted(places)}, len(places) - 1)
        if v not in writer:
            report.add("phantom_read", {"value": v, "at": sorted(places)})

    # -- lost writes, aborted reads, torn transactions at the end ------------------------
    for op in ops.values():
        values = [v for _t, _p, v in op.writes]
        if not values:
            continue
        visible = [v for v in values if v in committed]
        if op.status == "ok":
            if op.f == "send":
                lost = [v for v in values if v not in present]
            else:
                lost = [v for v in values if v not in committed] if not visible else []
            if lost:
                report.add("lost_write", {"op": op.id, "values": lost[:5]}, len(lost))
        if op.status == "fail" and visible:
            report.add("aborted_read", {"op": op.id, "reason": "aborted transaction visible at the end",
                                        "values": visible[:5]}, len(visible))
        if op.f == "txn" and visible and len(visible) != len(values):
            missing = [v for v in values if v not in committed]
            report.add("torn_transaction", {"op": op.id, "visible": visible[:5], "missing": missing[:5]})

    # -- reads: aborted reads, monotonicity and skips, torn reads -------------------------
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in polls:
        by_session[e["session"]].append(e)
    for session, session_polls in by_session.items():
        _check_session(report, session, assigns.get(session), session_polls, committed,
                       final_offset_rc, final_offset_ru, rc_place, writer)

    # -- sends: per process and partition, offsets only grow -----------------------------
    _check_sends(report, events, ops)

    # -- copiers: offsets and outputs visible together, nothing lost ---------------------
    for c in copies:
        _check_copy(report, c, groups.get(c["group"], {}), final_rc, high_watermarks, committed)

    # -- transfers conserve money --------------------------------------------------------
    transfers = [op for op in ops.values() if op.kind == "transfer"]
    if transfers:
        balance = sum(op.amounts.get(v, 0) for op in transfers for _t, _p, v in op.writes if v in committed)
        report.stats["transfer_balance"] = balance
        if balance != 0:
            report.add("torn_transaction", {"reason": "transfers do not sum to zero", "balance": balance})

    # -- dependency cycles -----------------------------------------------------------------
    g0, g1c = _cycles(final_rc, ops, writer, committed)
    for scc in g0:
        report.add("g0", {"transactions": scc[:10]})
    for scc in g1c:
        report.add("g1c", {"transactions": scc[:10]})

    report.stats.update(_stats(ops, polls, finals, committed))
    return report


def _check_session(report: Report, session: str, assign: dict[str, Any] | None,
                   session_polls: list[dict[str, Any]], committed: set[str],
                   final_offset_rc: dict[tuple[TP, int], str], final_offset_ru: dict[tuple[TP, int], str],
                   rc_place: dict[str, tuple[TP, int]], writer: dict[str, Op]) -> None:
    isolation = session_polls[0].get("isolation", READ_COMMITTED)
    expected: dict[TP, int] = {}
    if assign is not None:
        expected = {(t, int(p)): int(pos) for t, p, pos in assign["positions"]}
    seen_values: set[str] = set()
    for e in session_polls:
        for t, p, o, v in e["records"]:
            tp, o, v = (t, int(p)), int(o), str(v)
            seen_values.add(v)
            if isolation == READ_COMMITTED and v not in committed:
                report.add("aborted_read", {"session": session, "offset": (t, p, o), "value": v})
            nxt = expected.get(tp)
            if nxt is not None:
                if o < nxt:
                    report.add("nonmonotonic_poll", {"session": session, "partition": tp,
                                                     "expected": nxt, "got": o, "why": "went backwards"})
                elif o > nxt:
                    # read_uncommitted may skip what compaction dropped: aborted records,
                    # absent from the final read_uncommitted read too
                    skipped = [x for x in range(nxt, o)
                               if (tp, x) in final_offset_rc
                               or (isolation != READ_COMMITTED and (tp, x) in final_offset_ru)]
                    if skipped:
                        report.add("nonmonotonic_poll", {"session": session, "partition": tp,
                                                         "expected": nxt, "got": o,
                                                         "skipped": skipped[:5]})
            expected[tp] = max(o + 1, nxt or 0)
    # torn read: a committed transaction of which the session saw part, though it read
    # past every one of its records in the partitions it reads
    start = {} if assign is None else {(t, int(p)): int(pos) for t, p, pos in assign["positions"]}
    checked: set[str] = set()
    for v in seen_values:
        op = writer.get(v)
        if op is None or op.f != "txn" or op.id in checked:
            continue
        checked.add(op.id)
        for _t, _p, w in op.writes:
            if w in seen_values or w not in committed:
                continue
            tp, place = rc_place[w]
            if tp in expected and start.get(tp, 0) <= place < expected[tp]:
                report.add("torn_transaction", {"session": session, "op": op.id, "unseen": w})
                break


def _check_sends(report: Report, events: list[dict[str, Any]], ops: dict[str, Op]) -> None:
    last: dict[tuple[str, str, int], int] = {}
    for e in events:
        if e.get("type") != "ok" or e.get("f") not in ("txn", "send"):
            continue
        op = ops.get(e["id"])
        if op is None:
            continue
        for t, p, o, _v in sorted(op.sent, key=lambda s: (s[0], s[1], s[2])):
            key = (op.process, t, p)
            if o < 0 or (key in last and o <= last[key]):
                report.add("nonmonotonic_send", {"process": op.process, "partition": (t, p),
                                                 "previous": last.get(key), "got": o, "op": op.id})
            last[key] = max(o, last.get(key, -1))


def _check_copy(report: Report, copy: dict[str, Any], group: dict[TP, int],
                final_rc: dict[TP, list[tuple[int, str]]], high_watermarks: dict[TP, int],
                committed: set[str]) -> None:
    """Each committed input below the group's committed offset is copied exactly once, and
    nothing at or above it is copied. An output value is ``input + suffix + writer``, so
    every write stays unique while the input it came from is known."""
    suffix = copy["suffix"]
    copies: dict[str, list[str]] = defaultdict(list)
    for tp, rows in final_rc.items():
        if tp[0] == copy["output"]:
            for _o, v in rows:
                if suffix in v:
                    copies[v.split(suffix, 1)[0]].append(v)
    inputs = {tp: rows for tp, rows in final_rc.items() if tp[0] == copy["input"]}
    for tp, rows in inputs.items():
        position = group.get(tp, 0)
        for o, v in rows:
            n = len(copies.get(v, []))
            if o < position and n == 0:
                report.add("lost_write", {"copy": copy["input"], "input": (tp, o, v),
                                          "reason": "consumed (below the group offset) but never copied"})
            elif o >= position and n:
                report.add("torn_transaction", {"copy": copy["input"], "input": (tp, o, v),
                                                "reason": "copied, but its offset was not committed"})
            if n > 1:
                report.add("duplicate", {"copy": copy["input"], "input": (tp, o, v), "outputs": copies[v]},
                           n - 1)
    for tp, position in group.items():
        if tp[0] == copy["input"] and position > high_watermarks.get(tp, 0):
            report.add("inconsistent_offsets", {"group": copy["group"], "partition": tp, "offset": position,
                                                "reason": "committed group offset beyond the log"})


def _cycles(final_rc: dict[TP, list[tuple[int, str]]], ops: dict[str, Op], writer: dict[str, Op],
            committed: set[str]) -> tuple[list[list[str]], list[list[str]]]:
    """Nontrivial strongly connected components of the ww graph (G0) and of the ww+wr
    graph that contain no G0 component (G1c)."""
    ww: dict[str, set[str]] = defaultdict(set)
    for rows in final_rc.values():
        previous: str | None = None
        for _o, v in sorted(rows):
            op = writer.get(v)
            if op is None:
                continue
            if previous is not None and previous != op.id:
                ww[previous].add(op.id)
            previous = op.id
    wr: dict[str, set[str]] = defaultdict(set)
    for op in ops.values():
        if not op.reads or not any(v in committed for _t, _p, v in op.writes):
            continue
        for _t, _p, _o, v in op.reads:
            src = writer.get(v)
            if src is not None and src.id != op.id and v in committed:
                wr[src.id].add(op.id)
    g0 = [c for c in _sccs(ww) if len(c) > 1]
    in_g0 = {n for c in g0 for n in c}
    both: dict[str, set[str]] = defaultdict(set)
    for graph in (ww, wr):
        for a, bs in graph.items():
            both[a] |= bs
    g1c = [c for c in _sccs(both) if len(c) > 1 and not in_g0.intersection(c)]
    return g0, g1c


def _sccs(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """Tarjan's algorithm, iterative (histories have thousands of transactions)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    nodes = set(graph) | {b for bs in graph.values() for b in bs}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                yield sorted(component)


def _stats(ops: dict[str, Op], polls: list[dict[str, Any]], finals: list[dict[str, Any]],
           committed: set[str]) -> dict[str, Any]:
    outcomes: dict[str, int] = defaultdict(int)
    for op in ops.values():
        outcomes[f"{op.f}:{op.status}"] += 1
    unknown = [op for op in ops.values() if op.status == "unknown" and op.writes]
    return {
        "operations": dict(sorted(outcomes.items())),
        "unknown_committed": sum(1 for op in unknown if op.writes[0][2] in committed),
        "unknown_aborted": sum(1 for op in unknown if op.writes[0][2] not in committed),
        "polls": len(polls),
        "records_polled": sum(len(e["records"]) for e in polls),
        "partitions": len(finals),
        "records_committed": len(committed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check a chaos history for anomalies (docs/semantics.md).")
    parser.add_argument("history", nargs="+", help="JSON-lines history file(s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = check(read_history(args.history))
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        width = max(map(len, ANOMALIES))
        for name in ANOMALIES:
            print(f"{name:<{width}}  {report.counts[name]}")
            for example in report.examples.get(name, []):
                print(f"{'':<{width}}    e.g. {json.dumps(example, default=str)}")
        for key, value in report.stats.items():
            print(f"{key}: {value}")
        print("VALID" if report.ok else "INVALID")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""A Markdown table of chaos runs, for docs/reliability.md:

    PYTHONPATH=tests python -m chaos.summarize $CHAOS_SUMMARY            # a row per run
    PYTHONPATH=tests python -m chaos.summarize --totals $CHAOS_SUMMARY   # per backend, per anomaly class

One row per run (``CHAOS_SUMMARY`` holds one JSON line per run): seed, backend, seconds,
faults injected, operations by outcome, and the anomalies found.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def table(lines: list[dict]) -> str:
    head = ("| seed | backend | fault time / wall time | faults injected | client exits | operations "
            "(ok / aborted / unknown) | records committed / polled | anomalies |")
    rows = [head, "|" + "---|" * 8]
    totals: Counter[str] = Counter()
    for r in lines:
        ops = r["stats"]["operations"]
        ok = ops.get("txn:ok", 0) + ops.get("send:ok", 0)
        failed = ops.get("txn:fail", 0) + ops.get("send:fail", 0)
        unknown = ops.get("txn:unknown", 0) + ops.get("send:unknown", 0)
        faults = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items()))
        exits = ", ".join(f"{k} {v}" for k, v in sorted(r["exits"].items()))
        found = {k: v for k, v in r["anomalies"].items() if v}
        problems = r["stats"].get("fsck_problems") or []
        verdict = ("none" if not found else ", ".join(f"{k} {v}" for k, v in found.items())) + (
            f"; fsck problems {len(problems)}" if problems else "")
        rows.append(f"| {r['seed']} | {r['backend']} | {r['duration_s']:.0f} s / {r['seconds']:.0f} s | {faults} | "
                    f"{exits} | {ok} / {failed} / {unknown} | {r['stats']['records_committed']} / "
                    f"{r['stats']['records_polled']} | {verdict} |")
        totals.update({"runs": 1, "ok": ok, "failed": failed, "unknown": unknown,
                       "committed": r["stats"]["records_committed"], "polled": r["stats"]["records_polled"],
                       "anomalies": sum(found.values()), "wall": int(r["seconds"])})
        totals.update({f"fault:{k}": v for k, v in r["faults"].items()})
    rows.append(f"\nTotal: {totals['runs']} runs, {totals['wall']} s; operations {totals['ok']} ok, "
                f"{totals['failed']} aborted, {totals['unknown']} unknown; {totals['committed']} records "
                f"committed, {totals['polled']} polled; anomalies {totals['anomalies']}.")
    return "\n".join(rows)


def aggregate(lines: list[dict]) -> str:
    """Totals per backend: runs, wall time, faults, operations by outcome, transactions
    committed, and every anomaly class (a run passes only with zero of each)."""
    classes = sorted({k for r in lines for k in r["anomalies"]})
    head = ["backend", "runs", "wall time", "faults injected", "operations (ok / aborted / unknown)",
            "transactions committed", "unknown outcomes (committed / aborted)", "records committed / polled",
            *classes]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for backend in sorted({r["backend"] for r in lines}) + ["all"]:
        runs = [r for r in lines if backend in ("all", r["backend"])]
        t: Counter[str] = Counter()
        for r in runs:
            ops = r["stats"]["operations"]
            t.update({"ok": ops.get("txn:ok", 0) + ops.get("send:ok", 0),
                      "failed": ops.get("txn:fail", 0) + ops.get("send:fail", 0),
                      "unknown": ops.get("txn:unknown", 0) + ops.get("send:unknown", 0),
                      "commits": ops.get("txn:ok", 0), "faults": sum(r["faults"].values()),
                      "unknown_committed": r["stats"].get("unknown_committed", 0),
                      "unknown_aborted": r["stats"].get("unknown_aborted", 0),
                      "committed": r["stats"]["records_committed"], "polled": r["stats"]["records_polled"],
                      "wall": r["seconds"]})
            t.update({f"a:{k}": v for k, v in r["anomalies"].items()})
        rows.append(
            f"| {backend} | {len(runs)} | {t['wall'] / 60:.0f} min | {t['faults']} | {t['ok']} / {t['failed']} / "
            f"{t['unknown']} | {t['commits']} | {t['unknown_committed']} / {t['unknown_aborted']} | "
            f"{t['committed']} / {t['polled']} | " + " | ".join(str(t[f"a:{k}"]) for k in classes) + " |")
    return "\n".join(rows)


def main() -> None:
    args = sys.argv[1:]
    totals_only = "--totals" in args
    lines = [json.loads(line) for path in args if path != "--totals"
             for line in Path(path).read_text().splitlines() if line.strip()]
    print(aggregate(lines) if totals_only else table(lines))


if __name__ == "__main__":
    main()

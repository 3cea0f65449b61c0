"""Timing, interleaved repetitions, percentiles and the records every case returns.

Ratios are always taken between runs of the same repetition (baseline and candidate run
back to back, in alternating order: AB, BA, AB, ...), so slow drift of a shared machine
cancels out; a figure is the median of the per-repetition ratios, with their range as
the spread. Latencies are percentiles of many samples.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Target:
    """A goal for one figure: ``value op bound`` (``op`` is ``>=`` or ``<=``)."""

    op: str
    bound: float

    def met(self, value: float) -> bool:
        if math.isnan(value):
            return False
        return value >= self.bound if self.op == ">=" else value <= self.bound

    def __str__(self) -> str:
        return f"{'≥' if self.op == '>=' else '≤'} {self.bound:g}"


@dataclass
class Figure:
    """One reported number: a ratio (unit ``×``) or a latency percentile (``ms``)."""

    name: str
    value: float
    unit: str
    target: Target | None = None
    #: (lowest, highest) per-repetition ratio, or None
    spread: tuple[float, float] | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.target.met(self.value)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["target"] = None if self.target is None else {"op": self.target.op, "bound": self.target.bound,
                                                           "text": str(self.target)}
        out["met"] = self.met
        return out


@dataclass
class CaseResult:
    case: int
    title: str
    backend: str
    #: "ok", "not available" (a prerequisite is missing) or "failed" (it raised)
    status: str = "ok"
    sizes: str = ""
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: numbers behind the plots, by series name
    series: dict[str, Any] = field(default_factory=dict)
    #: query plans, by query name
    plans: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["figures"] = [f.to_json() for f in self.figures]
        return out


class Progress:
    """One line per step on stderr, with the time since the run started."""

    def __init__(self, quiet: bool = False) -> None:
        self.started = time.monotonic()
        self.quiet = quiet
        self.prefix = ""

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        print(f"[{int(elapsed // 60):02d}:{elapsed % 60:04.1f}] {self.prefix}{message}", file=sys.stderr, flush=True)


def timed(call: Callable[[], Any]) -> float:
    """Seconds ``call`` took."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def interleaved(variants: Mapping[str, Callable[[], float]], reps: int, *,
                progress: Callable[[str], None] | None = None, warmup: bool = True) -> dict[str, list[float]]:
    """Run every variant ``reps`` times, rotating the order each repetition (AB, BA, ...).
    Each variant returns the seconds of the part it measures (its own set-up and clean-up
    are not timed). A first untimed round warms caches, pools and imports."""
    names = list(variants)
    if warmup:
        for name in names:
            variants[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        order = names if rep % 2 == 0 else names[::-1]
        for name in order:
            times[name].append(variants[name]())
        if progress:
            progress(f"rep {rep + 1}/{reps}: " + ", ".join(f"{n} {times[n][-1]:.3f}s" for n in names))
    return times


def throughput_ratio(name: str, baseline: list[float], candidate: list[float], target: Target | None = None,
                     **detail: Any) -> Figure:
    """Candidate throughput over baseline throughput on the same work: per repetition,
    baseline seconds / candidate seconds; the median of those, with their range."""
    ratios = [b / c for b, c in zip(baseline, candidate, strict=True) if c > 0]
    value = float(np.median(ratios)) if ratios else float("nan")
    return Figure(name, value, "×", target, (min(ratios), max(ratios)) if ratios else None, {
        "baseline_s": _stats(baseline), "candidate_s": _stats(candidate), "ratios": ratios, **detail})


def _stats(samples: list[float]) -> dict[str, float]:
    return {"median": float(np.median(samples)), "min": float(min(samples)), "max": float(max(samples)),
            "n": len(samples)}


def percentiles(samples: list[float], points: tuple[float, ...] = (50, 90, 99)) -> dict[str, float]:
    """Percentiles of ``samples`` (seconds) in milliseconds, as ``{"p50": ...}``."""
    values = np.percentile(np.asarray(samples) * 1000.0, points)
    return {f"p{p:g}": float(v) for p, v in zip(points, values, strict=True)}


def latency_figure(name: str, samples: list[float], point: float, target: Target | None = None,
                   **detail: Any) -> Figure:
    """The ``point``-th percentile of ``samples`` (seconds), in milliseconds."""
    value = percentiles(samples, (point,))[f"p{point:g}"]
    return Figure(name, value, "ms", target, None, {"samples": len(samples), **percentiles(samples), **detail})


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.0f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:,.0f} kB"

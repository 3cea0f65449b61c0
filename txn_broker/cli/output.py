"""What the command line prints: tables and values for people, JSON for scripts, and a
progress line on a terminal. Plain standard library.

Human output goes to stdout; progress and status lines go to stderr and only when stderr
is a terminal, so pipes and scripts never see them. JSON output (``--json``) is one JSON
document on stdout (``consume``: one object per line) with the keys docs/cli.md lists.
"""

from __future__ import annotations

import decimal
import json
import sys
import time
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``1.5 KiB``."""
    if n is None:
        return "-"
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration(ms: int | None) -> str:
    """``93_500`` -> ``1m33s``; ``1_500`` -> ``1.5s``."""
    if ms is None:
        return "-"
    if ms < 0:
        return f"-{human_duration(-ms)}"
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def iso_ms(ms: int | None) -> str:
    """Milliseconds since the epoch as ISO-8601 UTC: ``2024-05-01T12:00:00.123Z``."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: characters a terminal would act on rather than show: controls (C0, DEL, C1), format
#: characters (bidirectional overrides, zero-width ones), line and paragraph separators and
#: lone surrogates
UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_SHORT_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def escape_text(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape
    (``\\n``, ``\\x1b``, ``\\u202e``), so that what is printed is what is there."""
    if text.isprintable():  # the common case, fast (every unprintable category is not printable)
        return text
    out = []
    for ch in text:
        if unicodedata.category(ch) in UNPRINTABLE_CATEGORIES:
            code = ord(ch)
            out.append(_SHORT_ESCAPES.get(ch) or (f"\\x{code:02x}" if code < 0x100 else
                                                  f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"))
        else:
            out.append(ch)
    return "".join(out)


def cell(value: Any) -> str:
    """A value as table text: ``-`` for none, ``yes``/``no`` for booleans; characters a
    terminal would act on escaped."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return escape_text(str(value))


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, max_width: int = 60) -> str:
    """A plain-text table: a header row, then one line per row; numbers right-aligned,
    text left-aligned, cells longer than ``max_width`` cut with ``…``. No rows: the
    header alone."""
    text_rows = []
    for row in rows:
        cells = []
        for value in row:
            s = cell(value)
            cells.append(s if len(s) <= max_width else s[: max_width - 1] + "…")
        text_rows.append(cells)
    widths = [len(h) for h in headers]
    for cells in text_rows:
        for i, s in enumerate(cells):
            widths[i] = max(widths[i], len(s))
    numeric = [bool(rows) and all(_is_number(r[i]) or r[i] is None for r in rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [s.rjust(w) if num else s.ljust(w) for s, w, num in zip(cells, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line([escape_text(h) for h in headers]), *(line(c) for c in text_rows)])


class Output:
    """Where a command writes. ``json_mode``: the command prints JSON, not tables."""

    def __init__(self, json_mode: bool = False, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.json_mode = json_mode
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._status_shown = False

    def json(self, document: Any) -> None:
        self.out.write(json.dumps(document, indent=2, ensure_ascii=False, default=_json_default) + "\n")

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str | None = None) -> None:
        if not rows and empty is not None:
            self.line(empty)
            return
        self.line(render_table(headers, rows))

    def fields(self, pairs: Sequence[tuple[str, Any]]) -> None:
        """``Name:  value`` lines, aligned."""
        width = max((len(k) for k, _ in pairs), default=0) + 1
        for key, value in pairs:
            self.line(f"{key + ':':<{width}}  {cell(value)}")

    def note(self, text: str) -> None:
        """A remark for people, on stderr (so stdout stays data)."""
        self.clear_status()
        self.err.write(text + "\n")

    @property
    def interactive(self) -> bool:
        return bool(getattr(self.err, "isatty", lambda: False)())

    def status(self, text: str) -> None:
        """A transient status line on a terminal's stderr (nothing when not a terminal)."""
        if self.interactive:
            self.err.write("\r\033[K" + text)
            self.err.flush()
            self._status_shown = True

    def clear_status(self) -> None:
        if self._status_shown:
            self.err.write("\r\033[K")
            self.err.flush()
            self._status_shown = False

    def progress(self, label: str, total_bytes: int | None = None, total_records: int | None = None) -> Progress:
        return Progress(self, label, total_bytes, total_records)


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):  # PostgreSQL's SUM() of BIGINT is NUMERIC
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode("ascii")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


class Progress:
    """``label [#######.......]  45%  12,345 records  3.4 MiB`` on a terminal's stderr,
    redrawn at most ten times a second; silent when stderr is not a terminal."""

    WIDTH = 24

    def __init__(self, output: Output, label: str, total_bytes: int | None, total_records: int | None) -> None:
        self.output = output
        self.label = label
        self.total_bytes = total_bytes
        self.total_records = total_records
        self.records = 0
        self.bytes = 0
        self._drawn = 0.0

    def update(self, records: int = 0, bytes_done: int | None = None) -> None:
        self.records += records
        if bytes_done is not None:
            self.bytes = bytes_done
        now = time.monotonic()
        if now - self._drawn >= 0.1:
            self._drawn = now
            self.output.status(self.render())

    def render(self) -> str:
        fraction = None
        if self.total_bytes:
            fraction = self.bytes / self.total_bytes
        elif self.total_records:
            fraction = self.records / self.total_records
        parts = [self.label]
        if fraction is not None:
            fraction = min(max(fraction, 0.0), 1.0)
            filled = int(fraction * self.WIDTH)
            parts.append(f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {fraction * 100:3.0f}%")
        parts.append(f"{self.records:,} records")
        if self.bytes:
            parts.append(human_bytes(self.bytes))
        return "  ".join(parts)

    def close(self) -> None:
        self.output.clear_status()

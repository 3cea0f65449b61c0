"""Writing a chaos history: one JSON object per line, appended with one ``write(2)`` each,
so a process killed at any instant leaves at most its last line torn (the checker skips
it). The invocation is written before the operation starts, so an operation the
process died in is still known to the checker, as one whose outcome is unknown.

Also used by the checker's tests to build hand-made histories in memory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


class History:
    """The history of one process (``path``), or an in-memory one (``path=None``)."""

    def __init__(self, path: str | Path | None = None, process: str = "p") -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self._fd = None if path is None else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: dict[str, Any]) -> None:
        event.setdefault("process", self.process)
        event["time"] = time.time()
        if self._fd is None:
            self.events.append(event)
        else:
            os.write(self._fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- writes ----------------------------------------------------------------------------

    def invoke(self, f: str, op_id: str, writes: Sequence[Sequence[Any]], *, kind: str | None = None,
               reads: Iterable[Sequence[Any]] = (), offsets: Iterable[Sequence[Any]] = ()) -> None:
        """``writes``: ``[topic, partition, value]`` or ``[topic, partition, value, amount]``."""
        self.write({"type": "invoke", "f": f, "id": op_id, "kind": kind or f,
                    "writes": [list(w) for w in writes], "reads": [list(r) for r in reads],
                    "offsets": [list(o) for o in offsets]})

    def ok(self, f: str, op_id: str, sent: Iterable[Sequence[Any]]) -> None:
        """``sent``: ``[topic, partition, offset, value]`` of every record written."""
        self.write({"type": "ok", "f": f, "id": op_id, "sent": [list(s) for s in sent]})

    def fail(self, f: str, op_id: str, error: str) -> None:
        """The operation certainly did not happen (a transaction we aborted)."""
        self.write({"type": "fail", "f": f, "id": op_id, "error": error})

    def info(self, f: str, op_id: str, error: str) -> None:
        """The outcome is unknown."""
        self.write({"type": "info", "f": f, "id": op_id, "error": error})

    # -- reads -----------------------------------------------------------------------------

    def assign(self, session: str, isolation: str, positions: Iterable[Sequence[Any]]) -> None:
        self.write({"type": "ok", "f": "assign", "session": session, "isolation": isolation,
                    "positions": [list(p) for p in positions]})

    def poll(self, session: str, isolation: str, records: Iterable[Sequence[Any]]) -> None:
        self.write({"type": "ok", "f": "poll", "session": session, "isolation": isolation,
                    "records": [list(r) for r in records]})

    def final(self, topic: str, partition: int, hw: int, lso: int, rc: Iterable[Sequence[Any]],
              ru: Iterable[Sequence[Any]]) -> None:
        self.write({"type": "ok", "f": "final", "topic": topic, "partition": partition, "hw": hw,
                    "lso": lso, "rc": [list(r) for r in rc], "ru": [list(r) for r in ru]})

    def final_group(self, group: str, offsets: Iterable[Sequence[Any]]) -> None:
        self.write({"type": "ok", "f": "final-group", "group": group, "offsets": [list(o) for o in offsets]})

    def meta(self, **fields: Any) -> None:
        self.write({"type": "meta", **fields})

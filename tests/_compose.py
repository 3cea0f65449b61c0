"""Reading docker-compose.yml as Compose does, shared by the stack's unit test
(tests/unit/test_compose.py) and the process topology that runs the same stack
(tests/e2e/topology.py)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

#: ``$$``, ``${VAR}`` or ``$VAR`` (the stack's files use no defaults)
REFERENCE = re.compile(
    r"\$(?:(?P<dollar>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


def tokens(value: Any) -> list[str]:
    """A command, entrypoint or healthcheck test as its argument list."""
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation of plain ${VAR}/$VAR references and $$ escapes; an
    undefined variable becomes empty, as in Compose."""

    def value(match: re.Match[str]) -> str:
        if match["dollar"]:
            return "$"
        return env.get(match["braced"] if match["braced"] is not None else match["named"], "")

    return REFERENCE.sub(value, text)


def references(text: str) -> Iterator[str]:
    """The variables ``text`` refers to."""
    for match in REFERENCE.finditer(text):
        if not match["dollar"]:
            yield match["braced"] if match["braced"] is not None else match["named"]

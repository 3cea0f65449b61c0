"""Points in time given by people (ISO 8601 text, datetimes) as the broker's timestamps:
milliseconds since the epoch, UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from .errors import InvalidInputError


def to_timestamp_ms(value: str | datetime | int) -> int:
    """``value`` in epoch milliseconds: an ISO 8601 string (``2026-01-31``,
    ``2026-01-31T08:00:00+01:00``, a trailing ``Z``), a datetime, or an int (already
    milliseconds). A time without an offset is UTC. Raises InvalidInputError."""
    if isinstance(value, bool):
        raise InvalidInputError(f"not a point in time: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidInputError(f"a timestamp must not be negative, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise InvalidInputError(f"not an ISO 8601 date or time: {text!r} (e.g. 2026-01-31T00:00:00Z)") from None
    if not isinstance(value, datetime):
        raise InvalidInputError(f"not a point in time: {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)

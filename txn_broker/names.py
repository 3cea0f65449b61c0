"""Validation of every user-supplied name before it reaches SQL or an object key."""

from __future__ import annotations

import re
import unicodedata

from .errors import InvalidNameError, InvalidTopicNameError

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_MAX_ID = 249
#: what an id may not hold: control characters (C0, DEL, C1: U+0085, U+009B...), format
#: characters (bidirectional overrides such as U+202E, zero-width ones), line and paragraph
#: separators (U+2028, U+2029)
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _refused_character(value: str) -> str | None:
    """The first character of ``value`` an id may not hold, None if there is none."""
    if value.isprintable():  # the common case: none of REFUSED_CATEGORIES is printable
        return None
    return next((ch for ch in value if unicodedata.category(ch) in REFUSED_CATEGORIES), None)


def validate_topic_name(name: object) -> str:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    if not isinstance(name, str) or not _TOPIC.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: use 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
        )
    return name


def validate_id(kind: str, value: object) -> str:
    """Transactional ids and group ids: 1-249 characters, none of them a control or format
    character or a line or paragraph separator (Unicode categories Cc, Cf, Zl, Zp)."""
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise InvalidNameError(
            f"invalid {kind} {value!r}: use 1-{_MAX_ID} characters without control characters"
        )
    refused = _refused_character(value)
    if refused is not None:
        raise InvalidNameError(
            f"invalid {kind} {value!r}: U+{ord(refused):04X} ({unicodedata.name(refused, 'unnamed')}, category "
            f"{unicodedata.category(refused)}) is a control or format character; use 1-{_MAX_ID} characters "
            "without control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidNameError(f"invalid {kind} {value!r}: not encodable as UTF-8") from None
    return value


def validate_partition(partition: object, partition_count: int, topic: str) -> int:
    from .errors import UnknownTopicOrPartitionError

    if not isinstance(partition, int) or isinstance(partition, bool) or not (
        0 <= partition < partition_count
    ):
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} has partitions 0..{partition_count - 1}; no partition {partition!r}"
        )
    return partition

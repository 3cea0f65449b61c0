"""Validation of every user-supplied name before it reaches SQL or an object key."""

from __future__ import annotations

import re

from .errors import InvalidNameError, InvalidTopicNameError

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_MAX_ID = 249
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate_topic_name(name: object) -> str:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    if not isinstance(name, str) or not _TOPIC.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: use 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
        )
    return name


def validate_id(kind: str, value: object) -> str:
    """Transactional ids and group ids: 1-249 printable characters."""
    if not isinstance(value, str) or not value or len(value) > _MAX_ID or _CONTROL.search(value):
        raise InvalidNameError(
            f"invalid {kind} {value!r}: use 1-{_MAX_ID} characters without control characters"
        )
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

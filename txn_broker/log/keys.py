"""Where segment objects live: ``topics/{topic_id}/{partition}/{name}.arrow``, formatted
and parsed here only. The broker owns nothing outside :data:`SEGMENT_PREFIX`, so gc never
deletes anything else in the bucket or directory."""

from __future__ import annotations

import re

SEGMENT_PREFIX = "topics/"
_PARTITION_KEY = re.compile(r"topics/(\d{1,18})/(\d{1,9})/")


def partition_prefix(topic_id: int, partition: int) -> str:
    """The prefix every segment object of one partition starts with."""
    return f"{SEGMENT_PREFIX}{topic_id}/{partition}/"


def segment_key(topic_id: int, partition: int, name: str) -> str:
    """The object key of a segment; ``name`` is unique to its writer and attempt."""
    return f"{partition_prefix(topic_id, partition)}{name}.arrow"


def parse_segment_key(key: str) -> tuple[int, int] | None:
    """``(topic_id, partition)`` of a segment object key, None for any other key."""
    m = _PARTITION_KEY.match(key)
    return (int(m[1]), int(m[2])) if m else None

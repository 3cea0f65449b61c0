"""docs/cli.md's table of topic configs is the registry's (txn_broker/topic_configs.py):
every key once, with its default and when a change takes effect, and no other key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from txn_broker.config import Settings
from txn_broker.topic_configs import TOPIC_CONFIGS, check_changes, validate_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def table_rows() -> dict[str, tuple[str, str]]:
    text = DOC.read_text()
    section = text[text.index("### Topic configs"):]
    section = section[:section.index("\n\n", section.index("| config |"))]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z.]+)`", cells[0]) if cells else None
        if match:
            rows[match[1]] = (cells[1], cells[2])
    return rows


def test_the_docs_table_lists_every_topic_config_with_its_default_and_effect():
    rows = table_rows()
    assert list(rows) == list(TOPIC_CONFIGS)
    settings = Settings()
    defaults = validate_config({}, settings)
    for name, config in TOPIC_CONFIGS.items():
        default_cell, effect = rows[name]
        assert effect == config.takes_effect, name
        value = defaults[name]
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        assert shown in default_cell.replace("`", "") or name in ("segment.bytes",), (name, default_cell, value)
        assert check_changes({name: value}) == {name: value}  # the default is itself a valid value


@pytest.mark.parametrize("name", sorted(TOPIC_CONFIGS))
def test_every_config_refuses_a_value_of_the_wrong_kind(name):
    from txn_broker.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match=re.escape(name)):
        check_changes({name: object()})

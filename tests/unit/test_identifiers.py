"""Identifiers refuse every Unicode control and format character and line or paragraph
separator (categories Cc, Cf, Zl, Zp), as their error message says; a topic that is not a
string is a typed error in subscribe() and send(), not a TypeError; CLI tables escape what a
terminal would act on."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

import txn_broker
from txn_broker import validate_id
from txn_broker.cli.output import Output, escape_text, render_table
from txn_broker.errors import InvalidNameError, InvalidTopicNameError

REFUSED = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp")]


@pytest.mark.parametrize("ch", ["\u0085", "\u009b", "\u202e", "\u2028", "\u2029", "\u200b", "\ufeff", "\x1b",
                                "\U000e0001"])
def test_the_characters_of_issue_31_are_refused(ch):
    for kind in ("transactional id", "group id"):
        with pytest.raises(InvalidNameError, match="control or format character"):
            validate_id(kind, f"orders{ch}load")


@given(st.sampled_from(REFUSED), st.text(max_size=10), st.text(max_size=10))
def test_every_refused_character_anywhere_is_refused(ch, before, after):
    with pytest.raises(InvalidNameError):
        validate_id("group id", before + ch + after)


@given(st.text(st.characters(exclude_categories=("Cc", "Cf", "Zl", "Zp", "Cs")), min_size=1, max_size=249))
def test_everything_else_is_accepted(value):
    assert validate_id("group id", value) == value


def test_a_topic_that_is_not_a_string_is_a_typed_error(tmp_path):
    with txn_broker.connect(f"sqlite:///{tmp_path}/b.db", (tmp_path / "s").as_uri()) as broker:
        broker.create_topic("t", partitions=1)
        consumer = broker.consumer()
        for topics in ([["t"]], [None], [b"t"]):
            with pytest.raises(InvalidTopicNameError):
                consumer.subscribe(topics)  # type: ignore[arg-type]
        producer = broker.producer()
        with pytest.raises(InvalidTopicNameError):
            producer.send(["t"], [{"value": b"x"}])  # type: ignore[arg-type]
        producer.close()
        consumer.close()


def test_cli_tables_escape_what_a_terminal_would_act_on():
    hostile = "a\u202eb\x1b[31mred\u0085\u2028\nz"
    assert escape_text(hostile) == "a\\u202eb\\x1b[31mred\\x85\\u2028\\nz"
    assert escape_text("plain é ü 日本") == "plain é ü 日本"
    table = render_table(["ID", "N\u202e"], [[hostile, 1]])
    assert all(line.isprintable() for line in table.splitlines())
    assert "\\u202e" in table and "\\x1b[31m" in table
    lines = []

    class Collect:
        def write(self, text: str) -> None:
            lines.append(text)

    out = Output(out=Collect())  # type: ignore[arg-type]
    out.fields([("Id", hostile)])
    assert all(part.rstrip("\n").isprintable() for part in lines)

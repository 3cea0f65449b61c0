"""Topic schemas written as text: ``--schema 'id:int64 not null,name:string'`` and the
JSON of ``--schema-file``.

Types are pyarrow's names, and the text pyarrow prints for a type parses back:

* scalars: ``string``, ``large_string``, ``binary``, ``large_binary``, ``bool``,
  ``int8`` .. ``int64``, ``uint8`` .. ``uint64``, ``float16``, ``float32`` (``float``),
  ``float64`` (``double``), ``date32``, ``date64``, ``null`` and pyarrow's other aliases;
* ``timestamp[UNIT]``, ``timestamp[UNIT, tz=ZONE]`` (UNIT: s, ms, us, ns), ``time32[UNIT]``,
  ``time64[UNIT]``, ``duration[UNIT]``, ``fixed_size_binary[N]``;
* ``decimal128(P, S)`` (also ``decimal(P, S)``), ``decimal256(P, S)``;
* ``list<T>`` / ``list<item: T>``, ``large_list<T>``, ``map<K, V>``,
  ``struct<name: T, ...>``.

A field is ``name:type``, optionally followed by ``not null``, ``default VALUE`` (a JSON
literal: what rows written before the field was added read as, e.g. ``default "EUR"``,
``default 0``) and ``id N`` (the field's id: ``topics alter`` matches fields to the latest
schema version by id, else by name, so ``id N`` with a new name renames field N).

The schema file is JSON: ``{"fields": [{"name": "id", "type": "int64", "nullable": false},
...]}`` (or just the list), a field optionally with ``"default"`` and ``"id"``.
``topics describe --json`` prints a topic's schema in this form, ids included, so it can
be edited and fed back to ``topics alter --schema-file`` (rename a field: change its
name, keep its id) or to ``topics create --schema-file`` (ids are given afresh there).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import DEFAULT_KEY, FIELD_ID_KEY, declared_default, field_id
from ..errors import SchemaMismatchError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"\d+")
_UNITS = ("s", "ms", "us", "ns")
_EXTRA_ALIASES = {"boolean": pa.bool_(), "float": pa.float32(), "double": pa.float64()}


class _Parser:
    """Recursive descent over one type or field-list text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, why: str) -> SchemaMismatchError:
        return SchemaMismatchError(f"bad schema {self.text!r} at position {self.pos + 1}: {why}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at(self, token: str) -> bool:
        self.skip_ws()
        return self.text.startswith(token, self.pos)

    def take(self, token: str) -> bool:
        if self.at(token):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            found = self.text[self.pos:self.pos + 10] or "the end"
            raise self.fail(f"expected {token!r}, found {found!r}")

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip_ws()
        m = pattern.match(self.text, self.pos)
        if not m:
            raise self.fail(f"expected {what}")
        self.pos = m.end()
        return m.group(0)

    def done(self) -> bool:
        self.skip_ws()
        return self.pos >= len(self.text)

    # -- grammar -------------------------------------------------------------------------

    def field_name(self) -> str:
        """Everything up to the ``:`` (names may hold spaces or dots, not , : < >)."""
        self.skip_ws()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in ":,<>":
            self.pos += 1
        name = self.text[start:self.pos].strip()
        if not name:
            raise self.fail("expected a column name")
        return name

    def not_null(self) -> bool:
        self.skip_ws()
        m = re.compile(r"not\s+null\b", re.I).match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return True
        return False

    def field(self) -> pa.Field:
        name = self.field_name()
        self.expect(":")
        type_ = self.type()
        nullable, default, fid = True, None, None
        while True:  # modifiers, in any order
            if self.not_null():
                nullable = False
            elif self.word("default"):
                default = self.json_literal()
            elif self.word("id"):
                fid = int(self.match(_NUMBER, "a field id"))
            else:
                break
        return with_extras(pa.field(name, type_, nullable=nullable), default, fid)

    def word(self, word: str) -> bool:
        self.skip_ws()
        m = re.compile(rf"{word}\b", re.I).match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return True
        return False

    def json_literal(self) -> str:
        """A JSON value (its text), e.g. ``"EUR"``, ``0``, ``1.5``, ``true``."""
        self.skip_ws()
        try:
            _, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            raise self.fail("expected a JSON literal after 'default' (e.g. \"text\", 0, 1.5, true)") from None
        literal = self.text[self.pos:end]
        self.pos = end
        return literal

    def fields(self, closing: str | None) -> list[pa.Field]:
        out = [self.field()]
        while self.take(","):
            out.append(self.field())
        if closing is None and not self.done():
            raise self.fail(f"unexpected {self.text[self.pos:self.pos + 10]!r}")
        return out

    def unit(self) -> str:
        unit = self.match(_IDENT, "a time unit (s, ms, us, ns)")
        if unit not in _UNITS:
            raise self.fail(f"unknown time unit {unit!r}; use one of {', '.join(_UNITS)}")
        return unit

    def type(self) -> pa.DataType:
        start = self.pos
        word = self.match(_IDENT, "a type name").lower()
        if word in ("list", "large_list"):
            self.expect("<")
            item = self._list_item()
            self.expect(">")
            return pa.list_(item) if word == "list" else pa.large_list(item)
        if word == "map":
            self.expect("<")
            key = self.type()
            self.expect(",")
            value = self.type()
            value_nullable = not self.not_null()
            self.expect(">")
            return pa.map_(key, value if value_nullable else pa.field("value", value, nullable=False))
        if word == "struct":
            self.expect("<")
            members = self.fields(">")
            self.expect(">")
            return pa.struct(members)
        if word in ("decimal", "decimal128", "decimal256"):
            self.expect("(")
            precision = int(self.match(_NUMBER, "a precision"))
            self.expect(",")
            scale = int(self.match(_NUMBER, "a scale"))
            self.expect(")")
            try:
                return (pa.decimal256 if word == "decimal256" else pa.decimal128)(precision, scale)
            except (ValueError, pa.ArrowInvalid) as error:
                raise self.fail(str(error)) from None
        if word == "timestamp":
            self.expect("[")
            unit = self.unit()
            tz = None
            if self.take(","):
                self.expect("tz")
                self.expect("=")
                self.skip_ws()
                begin = self.pos
                while self.pos < len(self.text) and self.text[self.pos] != "]":
                    self.pos += 1
                tz = self.text[begin:self.pos].strip() or None
            self.expect("]")
            return pa.timestamp(unit, tz=tz)
        if word in ("time32", "time64", "duration"):
            self.expect("[")
            unit = self.unit()
            self.expect("]")
            try:
                return {"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}[word](unit)
            except (ValueError, pa.ArrowInvalid) as error:
                raise self.fail(str(error)) from None
        if word == "fixed_size_binary":
            self.expect("[")
            width = int(self.match(_NUMBER, "a byte width"))
            self.expect("]")
            return pa.binary(width)
        if word in ("date32", "date64") and self.take("["):
            self.match(_IDENT, "a unit")
            self.expect("]")
        if word in _EXTRA_ALIASES:
            return _EXTRA_ALIASES[word]
        try:
            return pa.type_for_alias(word)
        except (ValueError, KeyError):
            self.pos = start
            raise self.fail(f"unknown type {word!r} (types: string, int64, float64, bool, binary, "
                            "timestamp[ms], date32, decimal128(p, s), list<T>, map<K, V>, struct<...>)") from None

    def _list_item(self) -> pa.Field | pa.DataType:
        self.skip_ws()
        named = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:").match(self.text, self.pos)
        if named:
            self.pos = named.end()
            item = self.type()
            return pa.field(named.group(1), item, nullable=not self.not_null())
        return self.type()


def parse_type(text: str) -> pa.DataType:
    """One type, e.g. ``timestamp[ms, tz=UTC]``; SchemaMismatchError if it is not one."""
    parser = _Parser(text)
    type_ = parser.type()
    if not parser.done():
        raise parser.fail(f"unexpected {text[parser.pos:parser.pos + 10]!r} after the type")
    return type_


def parse_schema(spec: str) -> pa.Schema:
    """``'id:int64 not null,name:string'`` -> a pyarrow schema (SchemaMismatchError if bad)."""
    if not spec or not spec.strip():
        raise SchemaMismatchError("bad schema '': give at least one column as name:type")
    return _schema(_Parser(spec).fields(None), spec)


def _schema(fields: list[pa.Field], source: str) -> pa.Schema:
    names = [f.name for f in fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaMismatchError(f"bad schema {source!r}: duplicate column(s) {duplicates}")
    return pa.schema(fields)


def schema_from_json(document: Any, source: str = "schema file") -> pa.Schema:
    """The JSON schema description (module docstring) -> a pyarrow schema."""
    fields_doc = document.get("fields") if isinstance(document, dict) else document
    if not isinstance(fields_doc, list) or not fields_doc:
        raise SchemaMismatchError(f"{source}: expected {{\"fields\": [{{\"name\": ..., \"type\": ...}}, ...]}}")
    fields = []
    for i, f in enumerate(fields_doc):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("type"), str):
            raise SchemaMismatchError(f"{source}: field {i} needs a string \"name\" and a string \"type\"")
        unknown = sorted(set(f) - {"name", "type", "nullable", "default", "id"})
        if unknown:
            raise SchemaMismatchError(f"{source}: field {f['name']!r} has unknown key(s) {unknown}")
        nullable = f.get("nullable", True)
        if not isinstance(nullable, bool):
            raise SchemaMismatchError(f"{source}: field {f['name']!r}: \"nullable\" must be true or false")
        try:
            type_ = parse_type(f["type"])
        except SchemaMismatchError as error:
            raise SchemaMismatchError(f"{source}: field {f['name']!r}: {error}") from None
        fid = f.get("id")
        if fid is not None and (isinstance(fid, bool) or not isinstance(fid, int) or fid <= 0):
            raise SchemaMismatchError(f"{source}: field {f['name']!r}: \"id\" must be a positive integer")
        default = json.dumps(f["default"]) if "default" in f else None
        fields.append(with_extras(pa.field(f["name"], type_, nullable=nullable), default, fid))
    return _schema(fields, source)


def with_extras(field: pa.Field, default: str | None, fid: int | None) -> pa.Field:
    """``field`` with a declared default (JSON text) and a field id, where given."""
    metadata = dict(field.metadata or {})
    if default is not None:
        metadata[DEFAULT_KEY] = default.encode()
    if fid is not None:
        metadata[FIELD_ID_KEY] = str(fid).encode()
    return field.with_metadata(metadata) if metadata else field


def read_schema_file(path: str) -> pa.Schema:
    from ..errors import InvalidInputError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInputError(f"cannot read schema file {path}: {error.strerror or error}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise SchemaMismatchError(f"schema file {path} is not valid JSON: {error}") from None
    return schema_from_json(document, f"schema file {path}")


def format_type(type_: pa.DataType) -> str:
    """The text of a type; :func:`parse_type` reads it back."""
    return str(type_)


def schema_to_json(schema: pa.Schema) -> dict[str, Any]:
    """A schema in the ``--schema-file`` form (with each field's id and default, where it
    has them)."""
    out = []
    for f in schema:
        entry: dict[str, Any] = {"name": f.name, "type": format_type(f.type), "nullable": f.nullable}
        has_default, value = declared_default(f)
        if has_default:
            entry["default"] = value
        if field_id(f) is not None:
            entry["id"] = field_id(f)
        out.append(entry)
    return {"fields": out}

"""What every command shares: the parsed global options, the broker (opened on first
use), the output, usage errors and the scrubbing of secrets from anything printed."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from .. import mask_url, resolve_database_url, url_secrets
from .output import Output

if TYPE_CHECKING:
    from .. import Broker


class UsageError(Exception):
    """The command line itself is wrong (exit code 2, like argparse's own errors)."""


class Context:
    """One command's run: options, output, and the broker opened on first use."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Output(json_mode=bool(args.json))
        self._broker: Broker | None = None

    @property
    def json(self) -> bool:
        return self.out.json_mode

    def database_url(self) -> str:
        url, _embedded = resolve_database_url(self.args.database_url)
        return url

    def secrets(self) -> list[str]:
        candidates = [self.args.database_url, os.environ.get("TXN_BROKER_DATABASE_URL")]
        return [s for url in candidates for s in url_secrets(url)]

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            import txn_broker

            check_database_url(self.database_url())
            self._broker = txn_broker.connect(self.args.database_url, self.args.storage_url)
        return self._broker

    def close(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None


def check_database_url(url: str) -> None:
    """InvalidConfigError (password masked) unless ``url`` is an SQLAlchemy URL."""
    import sqlalchemy as sa

    from ..errors import InvalidConfigError

    try:
        sa.make_url(url)
    except Exception:
        raise InvalidConfigError(
            f"invalid database URL {mask_url(url)}: expected an SQLAlchemy URL such as "
            "postgresql+psycopg2://user:password@host/db or sqlite:///path"
        ) from None


def positive_int(text: str) -> int:
    """argparse type: an int > 0."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def iso_datetime_ms(text: str) -> int:
    """argparse type: an ISO 8601 date or time, as epoch milliseconds (no offset: UTC)."""
    from .. import to_timestamp_ms
    from ..errors import InvalidInputError

    try:
        return to_timestamp_ms(text)
    except InvalidInputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def plain(value: Any) -> Any:
    """A dataclass, named tuple or container as JSON-able values."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value

"""Keeping secrets out of what is printed, logged or shown: the one implementation, used by
the broker's own messages, the CLI, the Airflow hook and the UI.

* :func:`mask_url`: a database URL with its password replaced by ``***``;
* :func:`strip_userinfo`: any other URL (storage, endpoint) without ``user:password@``;
* :func:`url_secrets`: what of a URL must never appear (its password, or all of it when
  it cannot be parsed, since it may hold a password nobody can find);
* :func:`redact`: a text with given secrets and any URL password in it replaced by ``***``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa

#: what a hidden secret is replaced with
MASK = "***"

_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^@\s]+)@")


def mask_url(url: str | sa.URL) -> str:
    """The database URL with its password replaced by ``***``, safe for logs and messages."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL may still contain a secret: show nothing of it
        return "<unparsable database URL>"


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (storage and endpoint URLs may carry them)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def url_secrets(url: str | None) -> list[str]:
    """What must never be printed of a database URL: its password, or the URL itself when
    it cannot be parsed."""
    if not url:
        return []
    try:
        password = sa.make_url(url).password
    except Exception:  # an unparsable URL: hide all of it
        return [url]
    return [str(password)] if password else []


def redact(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` without any of ``secrets`` (longest first, so a secret containing another
    is hidden whole) and without the password of any URL in it."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _USERINFO.sub(lambda m: f"{m['head']}{MASK}@", text)

"""``txn-broker``: the command line of the broker (docs/cli.md).

Exit codes: 0 success, 1 error (one ``error: ...`` line on stderr; ``fsck`` also exits 1
on an inconsistency), 2 usage error, 130 interrupted, 141 output pipe closed. No traceback
unless ``--debug``; nothing printed ever contains a database password.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from .. import redact
from ..errors import InvalidInputError, TxnBrokerError
from . import acls, consume, groups, iceberg, maintenance, metrics, produce, serve, topics, transactions
from .common import Context, UsageError

PROG = "txn-broker"


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The global options; on subcommands (``suppress``) they default to nothing, so
    ``txn-broker --json topics list`` and ``txn-broker topics list --json`` both work."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--database-url", metavar="URL", default=default(None),
                        help="metadata database (default: $TXN_BROKER_DATABASE_URL, else the embedded SQLite "
                             "database under $TXN_BROKER_HOME)")
    parser.add_argument("--storage-url", metavar="URL", default=default(None),
                        help="segment storage, file:///path or s3://bucket/prefix (default: "
                             "$TXN_BROKER_STORAGE_URL, else $TXN_BROKER_HOME/segments)")
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print machine-readable JSON on stdout")
    parser.add_argument("--debug", action="store_true", default=default(False),
                        help="show tracebacks and debug logs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Administer a txn-broker: topics, console produce/consume, consumer groups, "
                    "transactions, garbage collection and consistency checks.",
        epilog="Exit codes: 0 success, 1 error, 2 usage error. See docs/cli.md.",
    )
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    maintenance.register_db(commands, common)
    topics.register(commands, common)
    produce.register(commands, common)
    consume.register(commands, common)
    groups.register(commands, common)
    transactions.register(commands, common)
    maintenance.register(commands, common)
    serve.register(commands, common)
    metrics.register(commands, common)
    acls.register(commands, common)
    iceberg.register(commands, common)
    return parser


def _configure_logging(debug: bool, secrets: list[str]) -> None:
    class Redacting(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return redact(super().format(record), secrets)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Redacting("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("txn_broker")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    root.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # usage errors exit 2 here
    ctx = Context(args)
    secrets = ctx.secrets()
    _configure_logging(args.debug, secrets)

    def fail(message: str, code: int = 1) -> int:
        ctx.out.clear_status()
        one_line = " ".join(part.strip() for part in message.strip().splitlines())
        sys.stderr.write(redact(one_line, secrets) + "\n")
        return code

    try:
        code: int = args.handler(ctx, args)
        return code
    except UsageError as error:
        return fail(f"{PROG}: error: {error}", 2)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, without a second error on exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as error:
        if args.debug:
            sys.stderr.write(redact(traceback.format_exc(), secrets))
        if isinstance(error, InvalidInputError):  # malformed input: fix the command, exit 2
            return fail(f"error: {error}", 2)
        if isinstance(error, TxnBrokerError):
            return fail(f"error: {error}")
        hint = "" if args.debug else " (run with --debug for the traceback)"
        return fail(f"error: unexpected {type(error).__name__}: {error}{hint}")
    finally:
        try:
            ctx.close()
        except Exception as error:  # closing must not hide the command's own outcome
            logging.getLogger(__name__).debug("closing the broker failed: %s", error)


if __name__ == "__main__":
    sys.exit(main())

"""``txn-broker acls list | add | remove``: the Kafka ACLs every ``txn-broker serve`` of the
database enforces once clients authenticate (SASL), with kafka-acls' option names."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

# names the package loads on first use: these two are light; AclStore brings the protocol stack
from ..kafka import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from .common import Context, UsageError

if TYPE_CHECKING:
    from ..kafka import AclStore

OPERATIONS = sorted(o.name.lower().replace("_", "-") for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY))


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    acls = commands.add_parser("acls", help="Kafka ACLs enforced by `txn-broker serve` (kafka-acls' options)")
    actions = acls.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="the ACLs, or those of one resource")
    _resource_options(listing, required=False)
    listing.add_argument("--principal", metavar="P", help="only this principal's (User:NAME)")
    listing.set_defaults(handler=list_acls)
    for name, handler, text in (("add", add_acls, "add ACLs"), ("remove", remove_acls, "remove ACLs")):
        action = actions.add_parser(name, parents=[common], help=text)
        _resource_options(action, required=True)
        action.add_argument("--allow-principal", action="append", default=[], metavar="P",
                            help="User:NAME (or User:*) to allow; repeatable")
        action.add_argument("--deny-principal", action="append", default=[], metavar="P",
                            help="User:NAME (or User:*) to deny; repeatable (deny wins over allow)")
        action.add_argument("--allow-host", action="append", default=[], metavar="H",
                            help="host the allowed principals connect from (default *)")
        action.add_argument("--deny-host", action="append", default=[], metavar="H",
                            help="host the denied principals connect from (default *)")
        action.add_argument("--operation", action="append", default=[], metavar="OP", choices=OPERATIONS,
                            help=f"repeatable: {', '.join(OPERATIONS)}")
        action.set_defaults(handler=handler)


def _resource_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    which = parser.add_mutually_exclusive_group(required=required)
    which.add_argument("--topic", metavar="T", help="a topic name, prefix (with --resource-pattern-type "
                                                    "prefixed) or * for every topic")
    which.add_argument("--group", metavar="G", help="a consumer group (name, prefix or *)")
    which.add_argument("--transactional-id", metavar="ID", help="a transactional id (name, prefix or *)")
    which.add_argument("--cluster", action="store_true", help="the cluster (create topics, manage ACLs)")
    parser.add_argument("--resource-pattern-type", choices=("literal", "prefixed"), default="literal")


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str] | None:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, "kafka-cluster"
    return None


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    resource = _resource(args)
    assert resource is not None
    if not args.operation:
        raise UsageError("give at least one --operation")
    if not args.allow_principal and not args.deny_principal:
        raise UsageError("give --allow-principal or --deny-principal")
    pattern = PatternType[args.resource_pattern_type.upper()]
    out = []
    for permission, principals, hosts in ((Permission.ALLOW, args.allow_principal, args.allow_host or ["*"]),
                                          (Permission.DENY, args.deny_principal, args.deny_host or ["*"])):
        for principal in principals:
            for host in hosts:
                for op in args.operation:
                    out.append(AclBinding(resource[0], resource[1], pattern, principal, host,
                                          Operation[op.upper().replace("-", "_")], permission).check())
    return out


def _show(ctx: Context, acls: list[AclBinding], empty: str) -> None:
    rows = [{"resource_type": a.resource_type.name.lower(), "resource_name": a.resource_name,
             "pattern_type": a.pattern_type.name.lower(), "principal": a.principal, "host": a.host,
             "operation": a.operation.name.lower(), "permission": a.permission.name.lower()} for a in acls]
    if ctx.json:
        ctx.out.json({"acls": rows})
    else:
        ctx.out.table(["RESOURCE_TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                      [list(r.values()) for r in rows], empty=empty)


def list_acls(ctx: Context, args: argparse.Namespace) -> int:
    resource = _resource(args)
    matching = AclFilter(resource[0] if resource else ResourceType.ANY, resource[1] if resource else None,
                         PatternType[args.resource_pattern_type.upper()] if resource else PatternType.ANY,
                         args.principal)
    _show(ctx, _store(ctx).find(matching), "No ACLs.")
    return 0


def add_acls(ctx: Context, args: argparse.Namespace) -> int:
    bindings = _bindings(args)
    _store(ctx).add(bindings)
    _show(ctx, bindings, "No ACLs.")
    return 0


def remove_acls(ctx: Context, args: argparse.Namespace) -> int:
    store = _store(ctx)
    removed = []
    for acl in _bindings(args):
        removed += store.remove(AclFilter(acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal,
                                          acl.host, acl.operation, acl.permission))
    _show(ctx, removed, "No ACL matched.")
    return 0


def _store(ctx: Context) -> AclStore:
    from ..kafka import AclStore  # the listener's protocol stack, loaded only here

    return AclStore(ctx.broker)

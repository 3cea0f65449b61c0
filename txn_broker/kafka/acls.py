"""Kafka's ACLs: bindings, filters, and the authoriser that enforces them (Kafka's
AclAuthorizer model).

An ACL allows or denies a principal (``User:NAME``, or ``User:*`` for everyone), from a host
(or ``*``), an operation on the resources a pattern names: a literal name (or ``*`` for
every resource of the type) or a prefix. A request is refused when an ACL denies it (deny
wins over allow), allowed when one allows it (READ, WRITE, DELETE and ALTER imply DESCRIBE;
ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL is every operation), and, on a resource no ACL
names at all, allowed only with ``allow_everyone_if_no_acl_found``. Super users may do
everything. The ACLs are kept in the metadata database (table ``kafka_acls``), so every
listener of a cluster enforces the same ones; each listener reads them again every few
seconds and after each change it makes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidInputError
from .authorizer import Authorizer, Operation, Principal, ResourceType


class PatternType(enum.IntEnum):
    """Kafka's PatternType codes."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    """Kafka's AclPermissionType codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: what an allowed operation implies besides itself (Kafka's AclAuthorizer)
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}
WILDCARD = "*"


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def check(self) -> AclBinding:
        """This binding if it can be stored (InvalidInputError naming what is wrong)."""
        if self.resource_type not in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                      ResourceType.TRANSACTIONAL_ID):
            raise InvalidInputError(f"ACL resource type {self.resource_type.name} is not one of topic, group, "
                                    "cluster, transactional id")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidInputError(f"ACL pattern type {self.pattern_type.name} must be literal or prefixed")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise InvalidInputError(f"ACL operation {self.operation.name} is not an operation")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidInputError(f"ACL permission {self.permission.name} must be allow or deny")
        if not self.resource_name or not self.host:
            raise InvalidInputError("an ACL needs a resource name and a host ('*': any)")
        if any("\x00" in text for text in (self.resource_name, self.principal, self.host)):
            # PostgreSQL's text cannot hold it (and no Kafka name needs it)
            raise InvalidInputError("an ACL's resource name, principal and host may not contain NUL characters")
        if not self.principal.startswith("User:") or self.principal == "User:":
            raise InvalidInputError(f"ACL principal {self.principal!r} must be User:NAME or User:*")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != "kafka-cluster":
            raise InvalidInputError("the cluster resource is named kafka-cluster")
        return self

    def names(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's pattern names the resource."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def applies_to(self, principal: Principal) -> bool:
        return self.principal in (principal.name, "User:*") and self.host in (principal.host, WILDCARD)


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls and DeleteAcls: which bindings (ANY / None: any value)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:  # the bindings that would apply to the name
            if self.resource_name is not None and not acl.names(acl.resource_type, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        return ((self.principal is None or acl.principal == self.principal)
                and (self.host is None or acl.host == self.host)
                and (self.operation == Operation.ANY or acl.operation == self.operation)
                and (self.permission == Permission.ANY or acl.permission == self.permission))


class AclAuthorizer(Authorizer):
    """Kafka's authorisation over the ACLs last read (:meth:`load`)."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.acls: tuple[AclBinding, ...] = ()

    def load(self, acls: Iterable[AclBinding]) -> None:
        self.acls = tuple(acls)

    def allows(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if principal.name in self.super_users:
            return True
        on_resource = [a for a in self.acls if a.names(resource_type, name)]
        if not on_resource:
            return self.allow_everyone_if_no_acl_found
        mine = [a for a in on_resource if a.applies_to(principal)]
        if any(a.permission == Permission.DENY and a.operation in (operation, Operation.ALL) for a in mine):
            return False
        granting = {operation, Operation.ALL} | IMPLIED_BY.get(operation, frozenset())
        return any(a.permission == Permission.ALLOW and a.operation in granting for a in mine)

    def allows_any(self, principal: Principal, operation: Operation, resource_type: ResourceType) -> bool:
        if principal.name in self.super_users:
            return True
        granting = {operation, Operation.ALL} | IMPLIED_BY.get(operation, frozenset())
        mine = [a for a in self.acls if a.resource_type == resource_type and a.applies_to(principal)]
        if any(a.permission == Permission.DENY and a.operation in (operation, Operation.ALL)
               and a.pattern_type == PatternType.LITERAL and a.resource_name == WILDCARD for a in mine):
            return False
        return any(a.permission == Permission.ALLOW and a.operation in granting for a in mine)

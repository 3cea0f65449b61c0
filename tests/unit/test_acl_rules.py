"""Kafka's authorisation rules (txn_broker/kafka/acls.py), on bindings alone: literal,
wildcard and prefixed patterns, deny over allow, implied DESCRIBE, super users, hosts, and a
resource no ACL names (refused unless allow_everyone_if_no_acl_found)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txn_broker.errors import InvalidInputError
from txn_broker.kafka import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from txn_broker.kafka.acls import AclAuthorizer
from txn_broker.kafka.authorizer import Principal

T, G = ResourceType.TOPIC, ResourceType.GROUP
ALICE, BOB = Principal("User:alice", "10.0.0.1"), Principal("User:bob", "10.0.0.2")


def acl(name, principal, op, permission=Permission.ALLOW, pattern=PatternType.LITERAL, host="*", rtype=T):
    return AclBinding(rtype, name, pattern, principal, host, op, permission).check()


def test_patterns_deny_wins_implied_describe_and_super_users():
    auth = AclAuthorizer(super_users=["User:admin"])
    auth.load([
        acl("ord", "User:alice", Operation.WRITE, pattern=PatternType.PREFIXED),
        acl("*", "User:bob", Operation.READ),
        acl("audit", "User:bob", Operation.READ, Permission.DENY),
        acl("bobs", "User:bob", Operation.ALL, rtype=G, host="10.0.0.2"),
    ])
    assert auth.allows(ALICE, Operation.WRITE, T, "orders")
    assert auth.allows(ALICE, Operation.DESCRIBE, T, "orders")  # WRITE implies DESCRIBE
    assert not auth.allows(ALICE, Operation.READ, T, "orders")
    assert not auth.allows(ALICE, Operation.WRITE, T, "audit")  # bob's ACLs name it: none for alice
    assert auth.allows(BOB, Operation.READ, T, "orders")  # the wildcard
    assert not auth.allows(BOB, Operation.READ, T, "audit")  # deny wins over the wildcard's allow
    assert auth.allows(BOB, Operation.DESCRIBE, T, "audit")  # denying READ does not deny DESCRIBE
    assert auth.allows(BOB, Operation.DELETE, G, "bobs")  # ALL
    assert not auth.allows(Principal("User:bob", "10.0.0.9"), Operation.READ, G, "bobs")  # other host
    assert auth.allows(Principal("User:admin", "h"), Operation.DELETE, T, "audit")  # super user
    assert not auth.allows(ALICE, Operation.READ, G, "unnamed")  # no ACL at all: refused
    assert AclAuthorizer(allow_everyone_if_no_acl_found=True).allows(ALICE, Operation.READ, G, "unnamed")
    bits = auth.authorized_operations(ALICE, T, "orders")
    assert bits == (1 << Operation.WRITE) | (1 << Operation.DESCRIBE)


def test_filters_and_bad_bindings():
    acls = [acl("ord", "User:alice", Operation.WRITE, pattern=PatternType.PREFIXED),
            acl("orders", "User:bob", Operation.READ), acl("g", "User:bob", Operation.READ, rtype=G)]
    assert [a.resource_name for a in acls if AclFilter(T).matches(a)] == ["ord", "orders"]
    assert [a.resource_name for a in acls if AclFilter(T, "orders", PatternType.MATCH).matches(a)] == ["ord", "orders"]
    assert [a.resource_name for a in acls if AclFilter(T, "orders", PatternType.LITERAL).matches(a)] == ["orders"]
    assert [a.resource_name for a in acls if AclFilter(principal="User:bob").matches(a)] == ["orders", "g"]
    for bad in (dict(op=Operation.ANY), dict(principal="alice"), dict(pattern=PatternType.MATCH),
                dict(permission=Permission.ANY), dict(rtype=ResourceType.CLUSTER)):
        with pytest.raises(InvalidInputError):
            acl(bad.get("name", "x"), bad.get("principal", "User:a"), bad.get("op", Operation.READ),
                bad.get("permission", Permission.ALLOW), bad.get("pattern", PatternType.LITERAL),
                rtype=bad.get("rtype", T))


NAMES = st.sampled_from(["orders", "ord", "audit", "*", "o"])
BINDINGS = st.builds(
    AclBinding, st.sampled_from([T, G]), NAMES, st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]), st.sampled_from(["*", "10.0.0.1"]),
    st.sampled_from([Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL, Operation.DELETE]),
    st.sampled_from([Permission.ALLOW, Permission.DENY]))


@settings(max_examples=150, deadline=None)
@given(st.lists(BINDINGS, max_size=8), st.sampled_from([T, G]), st.sampled_from(["orders", "audit", "other"]),
       st.sampled_from([Operation.READ, Operation.WRITE, Operation.DESCRIBE]))
def test_a_matching_deny_always_refuses_and_a_super_user_is_always_allowed(acls, rtype, name, op):
    auth = AclAuthorizer(super_users=["User:root"], allow_everyone_if_no_acl_found=True)
    auth.load(acls)
    assert auth.allows(Principal("User:root", "h"), op, rtype, name)
    auth.load([*acls, AclBinding(rtype, name, PatternType.LITERAL, "User:alice", "*", op, Permission.DENY)])
    assert not auth.allows(ALICE, op, rtype, name)
    # a filter built from a binding selects it, and MATCH selects every binding naming the resource
    for a in acls:
        assert AclFilter(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation,
                         a.permission).matches(a)
        assert AclFilter(rtype, name, PatternType.MATCH).matches(a) == a.names(rtype, name)

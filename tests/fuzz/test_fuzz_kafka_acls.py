"""Kafka's ACL APIs fuzzed (DescribeAcls 29, CreateAcls 30, DeleteAcls 31, versions 1-3),
as frames through the listener's own dispatch (decode, handler, authoriser, store,
encode) on both backends: random creations, filters, pattern types, operations and
callers, well-formed or not. After every request:

* the listener answered (no request closes the connection) in the request's version;
* the stored ACLs, and those the authoriser holds, equal a model's;
* each answer is the model's: INVALID_REQUEST for a binding that cannot be stored,
  CLUSTER_AUTHORIZATION_FAILED for a caller without ALTER (DESCRIBE to describe) on the
  cluster, the bindings a filter matches;
* the authoriser grants exactly what Kafka's rules (written out again here) grant over the
  model's ACLs, for random principals, hosts, operations and resources.

``TXN_BROKER_FUZZ_EXAMPLES`` raises the example count (default 40 sequences of up to 8 requests per backend).
"""

from __future__ import annotations

import asyncio
import io
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from txn_broker.kafka import codec
from txn_broker.kafka.acls import AclFilter
from txn_broker.kafka.authorizer import Operation, Principal, ResourceType
from txn_broker.kafka.security import SaslSession, SaslUsers
from txn_broker.kafka.server import KafkaServer

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("TXN_BROKER_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DESCRIBE, CREATE, DELETE = 29, 30, 31
ADMIN, ALICE, BOB = Principal("User:admin", "10.0.0.9"), Principal("User:alice", "10.0.0.1"), \
    Principal("User:bob", "10.0.0.2")
CALLERS = (ADMIN, ALICE, BOB)
CLUSTER = "kafka-cluster"

# -- the rules, written out again (Kafka's AclAuthorizer) ----------------------------------

STORABLE_TYPES = {2, 3, 4, 5}  # topic, group, cluster, transactional id
IMPLIED = {8: {3, 4, 6, 7}, 10: {11}}  # DESCRIBE by READ, WRITE, DELETE, ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS
Row = tuple[int, str, int, str, str, int, int]  # type, name, pattern, principal, host, operation, permission


def storable(c: dict[str, Any]) -> bool:
    return (c["resource_type"] in STORABLE_TYPES and c["resource_pattern_type"] in (3, 4)
            and 2 <= c["operation"] <= 14 and c["permission_type"] in (2, 3)
            and c["resource_name"] != "" and c["host"] != ""
            and not any("\x00" in c[k] for k in ("resource_name", "principal", "host"))
            and c["principal"].startswith("User:") and c["principal"] != "User:"
            and (c["resource_type"] != 4 or c["resource_name"] == CLUSTER))


def row_of(c: dict[str, Any]) -> Row:
    return (c["resource_type"], c["resource_name"], c["resource_pattern_type"], c["principal"], c["host"],
            c["operation"], c["permission_type"])


def names(row: Row, rtype: int, name: str) -> bool:
    if row[0] != rtype:
        return False
    return name.startswith(row[1]) if row[2] == 4 else row[1] in (name, "*")


def granted(acls: set[Row], who: Principal, operation: int, rtype: int, name: str) -> bool:
    if who == ADMIN:
        return True
    on = [a for a in acls if names(a, rtype, name)]
    if not on:
        return False  # no --allow-everyone-if-no-acl-found
    mine = [a for a in on if a[3] in (who.name, "User:*") and a[4] in (who.host, "*")]
    if any(a[6] == 2 and a[5] in (operation, 2) for a in mine):
        return False
    return any(a[6] == 3 and a[5] in {operation, 2} | IMPLIED.get(operation, set()) for a in mine)


def known(value: int, low: int, high: int) -> int:
    """An enum code as the listener reads it: an unknown code is UNKNOWN (0)."""
    return value if low <= value <= high else 0


def matches(f: dict[str, Any], a: Row) -> bool:
    rtype, pattern = known(f["resource_type_filter"], 0, 7), known(f["pattern_type_filter"], 0, 4)
    operation, permission = known(f["operation"], 0, 14), known(f["permission_type"], 0, 3)
    name = f["resource_name_filter"]
    if rtype != 1 and a[0] != rtype:
        return False
    if pattern == 2:  # MATCH: the bindings that apply to the name
        if name is not None and not names(a, a[0], name):
            return False
    elif (pattern != 1 and a[2] != pattern) or (name is not None and a[1] != name):
        return False
    return ((f["principal_filter"] is None or a[3] == f["principal_filter"])
            and (f["host_filter"] is None or a[4] == f["host_filter"])
            and (operation == 1 or a[5] == operation) and (permission == 1 or a[6] == permission))


# -- random requests ----------------------------------------------------------------------

def code(valid: list[int]) -> st.SearchStrategy[int]:
    """Mostly a valid code, sometimes any int8."""
    return st.integers(0, 9).flatmap(lambda n: st.integers(-128, 127) if n == 0 else st.sampled_from(valid))


texts = st.one_of(st.sampled_from(["*", "", "orders", "ord", "o", CLUSTER, "x'; DROP TABLE kafka_acls; --",
                                   "%", "_", "\\", "{now_ms}", "a\x00b"]),
                  st.text(max_size=12))
principals = st.one_of(st.sampled_from(["User:alice", "User:bob", "User:*", "User:", "alice", "Group:x"]),
                       st.text(max_size=10).map(lambda t: f"User:{t}"))
hosts = st.one_of(st.sampled_from(["*", "10.0.0.1", "10.0.0.2", ""]), st.text(max_size=8))
creations = st.fixed_dictionaries({
    "resource_type": code([2, 3, 4, 5]), "resource_name": texts, "resource_pattern_type": code([3, 4]),
    "principal": principals, "host": hosts, "operation": code(list(range(2, 15))), "permission_type": code([2, 3]),
})
filters = st.fixed_dictionaries({
    "resource_type_filter": code([1, 2, 3, 4, 5]), "resource_name_filter": st.one_of(st.none(), texts),
    "pattern_type_filter": code([1, 2, 3, 4]), "principal_filter": st.one_of(st.none(), principals),
    "host_filter": st.one_of(st.none(), hosts), "operation": code(list(range(1, 15))),
    "permission_type": code([1, 2, 3]),
})
steps = st.lists(st.one_of(
    st.tuples(st.just(CREATE), st.sampled_from(CALLERS), st.integers(1, 3), st.lists(creations, max_size=4)),
    st.tuples(st.just(DELETE), st.sampled_from(CALLERS), st.integers(1, 3), st.lists(filters, max_size=3)),
    st.tuples(st.just(DESCRIBE), st.sampled_from(CALLERS), st.integers(1, 3), filters),
), min_size=1, max_size=8)
probes = st.lists(st.tuples(st.sampled_from([*CALLERS, Principal("User:carol", "10.0.0.1")]),
                            st.sampled_from([3, 4, 5, 6, 7, 8, 10, 11, 12]), st.sampled_from([2, 3, 4, 5]), texts),
                  max_size=6)


# -- the listener, in process --------------------------------------------------------------

class Caller:
    """Frames to the listener's dispatch as one authenticated principal."""

    def __init__(self, server: KafkaServer, who: Principal) -> None:
        self.server, self.who = server, who
        self.session = SaslSession(server.sasl_users)  # type: ignore[arg-type]
        self.session.mechanism, self.session.user = "PLAIN", who.name.removeprefix("User:")
        self.correlation = 0

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.correlation += 1
        request = codec.build(load_request_schema(api_key, version), body)
        out = io.BytesIO()
        header = request.__header_schema__  # v1 or v2 (flexible)
        entity_writer(header)(out, header(request_api_key=api_key, request_api_version=version,
                                          correlation_id=self.correlation, client_id="fuzz"))
        entity_writer(type(request))(out, request)
        answer = asyncio.run(self.server._dispatch(out.getvalue(), (self.who.host, 5000), self.session))
        assert isinstance(answer, bytes), answer
        cls = load_response_schema(api_key, version)
        header, used = entity_reader(ResponseHeaderV1 if cls.__flexible__ else ResponseHeaderV0)(answer, 0)
        assert header.correlation_id == self.correlation
        response, size = entity_reader(cls)(answer, used)
        assert size + used == len(answer)
        return response


def stored(server: KafkaServer) -> set[Row]:
    return {(int(a.resource_type), a.resource_name, int(a.pattern_type), a.principal, a.host, int(a.operation),
             int(a.permission)) for a in server.acl_store.find()}


@pytest.fixture
def listener(broker, tmp_path):
    users = tmp_path / "users"
    users.write_text("admin:a\nalice:a\nbob:a\n")
    server = KafkaServer(broker, sasl_users=SaslUsers.from_file(users), super_users=["User:admin"])
    yield server
    server._pool.shutdown(wait=True)


def _clear(server: KafkaServer) -> None:
    """No ACL (each example starts from none)."""
    server.acl_store.remove(AclFilter())
    asyncio.run(server.refresh_acls())


@FUZZ
@given(steps=steps, probes=probes)
def test_acl_apis_never_crash_never_over_grant_and_store_what_the_model_holds(listener, steps, probes):
    _clear(listener)
    model: set[Row] = set()
    callers = {who: Caller(listener, who) for who in CALLERS}
    for api, who, version, body in steps:
        caller = callers[who]
        if api == CREATE:
            may = granted(model, who, 7, 4, CLUSTER)
            response = caller.send(CREATE, version, {"creations": body})
            assert len(response.results) == len(body)
            for c, result in zip(body, response.results, strict=True):
                if not may:
                    assert result.error_code == ErrorCode.cluster_authorization_failed
                elif storable(c):
                    assert result.error_code == ErrorCode.none, (c, result)
                    model.add(row_of(c))
                else:
                    assert result.error_code == ErrorCode.invalid_request, (c, result)
        elif api == DELETE:
            may = granted(model, who, 7, 4, CLUSTER)
            response = caller.send(DELETE, version, {"filters": body})
            assert len(response.filter_results) == len(body)
            for f, result in zip(body, response.filter_results, strict=True):
                if not may:
                    assert result.error_code == ErrorCode.cluster_authorization_failed
                    continue
                assert result.error_code == ErrorCode.none
                gone = {a for a in model if matches(f, a)}
                answered = {(int(m.resource_type), m.resource_name, int(m.pattern_type), m.principal, m.host,
                             int(m.operation), int(m.permission_type)) for m in result.matching_acls}
                assert answered == gone, (f, answered, gone)
                model -= gone
        else:
            response = caller.send(DESCRIBE, version, body)
            if not granted(model, who, 8, 4, CLUSTER):
                assert response.error_code == ErrorCode.cluster_authorization_failed and not response.resources
            else:
                assert response.error_code == ErrorCode.none
                described = {(int(r.resource_type), r.resource_name, int(r.pattern_type), a.principal, a.host,
                              int(a.operation), int(a.permission_type)) for r in response.resources for a in r.acls}
                assert described == {a for a in model if matches(body, a)}
        assert stored(listener) == model
        assert {(int(a.resource_type), a.resource_name, int(a.pattern_type), a.principal, a.host,
                 int(a.operation), int(a.permission)) for a in listener.authorizer.acls} == model  # type: ignore[attr-defined]
    for who, operation, rtype, name in probes:
        name = CLUSTER if rtype == 4 else name
        expected = granted(model, who, operation, rtype, name)
        assert listener.authorizer.allows(who, Operation(operation), ResourceType(rtype), name) == expected, (
            who, operation, rtype, name, model)


@pytest.mark.parametrize("name", ["a\x00b", "\u202eevil", "x" * 300])
def test_awkward_names_are_stored_or_refused_never_dropping_the_connection(listener, name):
    """A NUL (which PostgreSQL's text cannot hold), a bidirectional override, a long name."""
    admin = Caller(listener, ADMIN)
    creation = {"resource_type": 2, "resource_name": name, "resource_pattern_type": 3, "principal": "User:alice",
                "host": "*", "operation": 3, "permission_type": 3}
    (result,) = admin.send(CREATE, 3, {"creations": [creation]}).results
    if result.error_code == ErrorCode.none:
        assert stored(listener) == {row_of(creation)}
    else:
        assert result.error_code == ErrorCode.invalid_request and stored(listener) == set()

"""Grants derived from calls: each function's role policy is exactly what infra/grants.json says
the function calls (recorded by tests/tests/it/grants.rs through an SDK interceptor) plus what the
Lambda service does with the role, for each like-events source. A missing grant and an unused
grant both fail. Entries marked `act` (the autopilot's reshards) are granted only with the act
switch on (var.autopilot_act): a default plan grants exactly the others.

The policies are HCL expressions spread over the root module and the blocks (modules/); tests/hcl.py
follows each module call and resolves the few forms the modules use (resource ARNs, module outputs,
the per-source statement, the guard's watched tables and managed rule names), and refuses any other
form, so a new form cannot slip past unchecked.
"""

import json

import pytest

from hcl import Mod, clean, unq
from test_module import LIKE_EVENTS_SOURCES, MODULE, REPO, SCHEMA

MANIFEST = json.loads((REPO / "infra" / "grants.json").read_text())
PREFIX = SCHEMA["prefix"]
ROOT_DEFAULT = Mod(MODULE)
FUNCTIONS = ["likes-api", "likes-aggregator", "count-rebuilder", "hotkey-controller", "autopilot"]
# Where each function's role is declared: (module path from the root, function call).
CALLS = {
    "likes-api": ([], "likes_api"),
    "likes-aggregator": (["counter"], "aggregator"),
    "count-rebuilder": (["counter"], "rebuilder"),
    "hotkey-controller": (["guard"], "controller"),
    "autopilot": ([], "autopilot"),
}
RESHARDS = ["kinesis:MergeShards", "kinesis:SplitShard"]
# Functions of blocks the root module does not deploy (the slot directory's autopilot): each is
# checked on an example that deploys it (examples/places), under the example's names.
BLOCK_ONLY = ["directory-autopilot"]


def expected(fn, mode, example=None, act=False):
    """What a role must hold in `mode` (for an example: under its names, infra/grants.json `examples`,
    a `rename_each` resource as each of the resources it stands for); the entries marked `act` only
    with the act switch on."""
    example = example or {}
    prefix = example.get("prefix", PREFIX)
    rename = {**example.get("rename", {}), **example.get("rename_by_function", {}).get(fn, {})}
    each = example.get("rename_each", {})
    entries = MANIFEST["calls"].get(fn, []) + MANIFEST["platform"].get(fn, [])
    out = set()
    for g in entries:
        if mode not in g.get("modes", [mode]):
            continue
        if g.get("act") and not act:
            continue
        resource = g["resource"].replace("<prefix>", prefix)
        for old in sorted(rename, key=len, reverse=True):
            if resource == old or resource.startswith(old + "/"):
                resource = rename[old] + resource[len(old) :]
                break
        resources = [resource]
        for old in sorted(each, key=len, reverse=True):
            if resource == old or resource.startswith(old + "/"):
                resources = [name + resource[len(old) :] for name in each[old]]
                break
        out.update(f'{g["action"]} {r}' for r in resources)
    return sorted(out)


def granted(root, fn, prefix=PREFIX, calls=None):
    path, call = (calls or CALLS)[fn]
    scope = root
    for name in path:
        scope = scope.call(name)
    return scope.grants(call, prefix)


@pytest.mark.parametrize("act", [False, True], ids=["dry-run", "act"])
@pytest.mark.parametrize("mode", LIKE_EVENTS_SOURCES)
@pytest.mark.parametrize("fn", FUNCTIONS)
def test_grants_are_exactly_the_calls(fn, mode, act):
    root = Mod(MODULE, root_vars={"like_events_source": mode, **({"autopilot_act": True} if act else {})})
    want, have = expected(fn, mode, act=act), granted(root, fn)
    assert {"missing": [g for g in want if g not in have], "unused": [g for g in have if g not in want]} == {
        "missing": [],
        "unused": [],
    }


def test_only_the_autopilots_have_act_entries():
    act = [(fn, g) for fn, gs in MANIFEST["calls"].items() for g in gs if "act" in g]
    assert act and all(fn in ("autopilot", "directory-autopilot") and g["act"] is True for fn, g in act)
    assert sorted(g["action"] for fn, g in act if fn == "autopilot") == RESHARDS
    assert [g for fn, g in act if fn == "directory-autopilot"]
    assert not [g for gs in MANIFEST["platform"].values() for g in gs if "act" in g]


@pytest.mark.parametrize("mode", LIKE_EVENTS_SOURCES)
def test_the_autopilot_may_reshard_only_with_the_act_switch_on(mode):
    """The default (autopilot_act = false) is a dry run whose role cannot split or merge; the switch
    adds exactly SplitShard and MergeShards on like-events, to the autopilot's role only."""
    assert ROOT_DEFAULT.var_value("autopilot_act") is False
    off = Mod(MODULE, root_vars={"like_events_source": mode})
    on = Mod(MODULE, root_vars={"like_events_source": mode, "autopilot_act": True})
    assert not [g for fn in FUNCTIONS for g in granted(off, fn) if g.split(" ")[0] in RESHARDS]
    added = [g for g in granted(on, "autopilot") if g not in granted(off, "autopilot")]
    assert sorted(added) == [f"{a} stream/like-events" for a in RESHARDS]
    for fn in FUNCTIONS:
        if fn != "autopilot":
            assert granted(on, fn) == granted(off, fn), fn
    # The function is told the same switch.
    env = clean(on.calls["autopilot"])["environment"]
    assert 'HEATSINK_AUTOPILOT_ACT = var.autopilot_act ? "true" : "false"' in env


EXAMPLE = MANIFEST["examples"]["orders"]
# The orders example (examples/orders): its module calls for each function.
EXAMPLE_CALLS = {
    "likes-aggregator": (["orders_per_customer"], "aggregator"),
    "count-rebuilder": (["orders_per_customer"], "rebuilder"),
    "hotkey-controller": (["guard"], "controller"),
}


@pytest.mark.parametrize("fn", EXAMPLE["functions"])
def test_the_orders_example_grants_are_exactly_the_calls(fn):
    """The blocks deployed for a user's own table hold the same calls, under the example's names."""
    root = Mod(MODULE / "examples" / "orders")
    want = expected(fn, EXAMPLE["source"], EXAMPLE)
    have = granted(root, fn, EXAMPLE["prefix"], EXAMPLE_CALLS)
    assert {"missing": [g for g in want if g not in have], "unused": [g for g in have if g not in want]} == {
        "missing": [],
        "unused": [],
    }
    assert sorted(EXAMPLE_CALLS) == sorted(EXAMPLE["functions"])


def test_every_role_policy_is_its_log_stream_plus_the_statements():
    fn = Mod(MODULE / "modules" / "function")
    policy = fn.resources[("aws_iam_role_policy", "this")]
    text = str(policy["policy"])
    assert "concat(" in text and "var.statements" in text
    assert '"logs:CreateLogStream", "logs:PutLogEvents"' in text and "${aws_cloudwatch_log_group.this.arn}:*" in text
    assert sorted(CALLS) == sorted(FUNCTIONS) == sorted(set(MANIFEST["calls"]) - set(BLOCK_ONLY))
    # A block-only function is checked on an example that deploys it.
    for fn in BLOCK_ONLY:
        assert fn in MANIFEST["calls"] and fn in MANIFEST["platform"]
        assert any(fn in e["functions"] for e in MANIFEST["examples"].values()), fn


PLACES = MANIFEST["examples"]["places"]
# The places example (examples/places): the directory autopilot's module call and its function call.
PLACES_CALLS = {"directory-autopilot": (["autopilot"], "directory_autopilot")}


def places(act=None):
    return Mod(MODULE / "examples" / "places", root_vars={} if act is None else {"act": act})


@pytest.mark.parametrize("act", [False, True], ids=["dry-run", "act"])
@pytest.mark.parametrize("fn", PLACES["functions"])
def test_the_places_example_grants_are_exactly_the_calls(fn, act):
    """The directory autopilot on a team's slot directory holds exactly its calls under the example's
    names (table/owner is each of places-a, places-b and places-c): without the act entries in a dry
    run, all of them with the switch on."""
    want = expected(fn, PLACES.get("source", "kinesis"), PLACES, act=act)
    have = granted(places(act), fn, PLACES["prefix"], PLACES_CALLS)
    assert {"missing": [g for g in want if g not in have], "unused": [g for g in have if g not in want]} == {
        "missing": [],
        "unused": [],
    }
    assert sorted(PLACES_CALLS) == sorted(PLACES["functions"])
    assert "dynamodb:Query table/slots" in want
    assert ("dynamodb:DescribeTable table/c" in want) == act


def test_the_places_example_is_a_dry_run_unless_switched_on():
    """The default is a dry run; act = true adds exactly the act entries, on the directory, every owner
    and spare, and their streams, and nothing else."""
    default = places()
    assert default.var_value("act") is False
    assert default.call("autopilot").var_value("act") is False
    assert Mod(MODULE / "modules" / "directory-autopilot").var_value("act") is False
    off, on = granted(default, "directory-autopilot", PLACES["prefix"], PLACES_CALLS), granted(places(True), "directory-autopilot", PLACES["prefix"], PLACES_CALLS)
    assert off == granted(places(False), "directory-autopilot", PLACES["prefix"], PLACES_CALLS)
    added = [g for g in on if g not in off]
    act_entries = sorted(
        f'{g["action"]} {r}'
        for g in MANIFEST["calls"]["directory-autopilot"]
        if g.get("act")
        for r in ([g["resource"].replace("table/owner", f"table/{o}") for o in "abc"] if g["resource"].startswith("table/owner") else [g["resource"].replace("table/directory", "table/slots")])
    )
    assert sorted(added) == act_entries
    # 2 on the directory, 6 on each of the 3 owners and 3 on each one's stream.
    assert len(added) == 2 + 3 * (6 + 3)
    assert all(g in on for g in off)
    # A dry run cannot write the directory's entries or an owner's items, nor read a stream.
    writes = {f"dynamodb:{w}" for w in ("PutItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems", "UpdateTable", "GetRecords")}
    assert not [g for g in off if g.split(" ")[0] in writes]
    # The function is told the same switch.
    env = unq(default.call("autopilot").locals["environment"])
    assert 'HEATSINK_AUTOPILOT_ACT = var.act ? "true" : "false"' in env

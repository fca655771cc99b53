"""Grants derived from calls: each function's role policy in iam.tf is exactly what
infra/grants.json says the function calls (recorded by tests/tests/it/grants.rs through an SDK
interceptor) plus what the Lambda service does with the role, for each like-events source. A
missing grant and an unused grant both fail.

iam.tf's policies are HCL expressions; this test resolves the few forms the module uses (resource
ARNs, the per-source statement, the controller's watched tables and managed rule names) with the
variables' defaults, and refuses any other form, so a new form cannot slip past unchecked.
"""

import json
import re

import pytest

from test_module import LIKE_EVENTS_SOURCES, REPO, RESOURCES, SCHEMA, iam_locals, named, unq, variable_default

MANIFEST = json.loads((REPO / "infra" / "grants.json").read_text())
PREFIX = SCHEMA["prefix"]
FUNCTIONS = ["likes-api", "likes-aggregator", "count-rebuilder", "hotkey-controller"]


def expected(fn, mode):
    entries = MANIFEST["calls"].get(fn, []) + MANIFEST["platform"].get(fn, [])
    return sorted(
        {f'{g["action"]} {g["resource"].replace("<prefix>", PREFIX)}' for g in entries if mode in g.get("modes", [mode])}
    )


def short(name):
    assert name.startswith(PREFIX), name
    return name[len(PREFIX) :]


def gsis(table):
    """The GSI names the Rust schema gives a table (what the module's table resource declares)."""
    (spec,) = [t for t in SCHEMA["tables"] if t["table"] == table]
    return [g["name"] for g in spec.get("gsis", [])]


def logical(expression):
    """A policy Resource expression as logical resource names."""
    text = unq(expression)
    m = re.fullmatch(r"\$\{aws_(dynamodb_table|kinesis_stream|sqs_queue)\.(\w+)\.(arn|stream_arn)\}", text)
    if m:
        kind, rname, attr = m.groups()
        body = RESOURCES[(f"aws_{kind}", rname)]
        name = short(named(body["name"]))
        return [{"dynamodb_table": "table/", "kinesis_stream": "stream/", "sqs_queue": "queue/"}[kind] + name + ("/stream" if attr == "stream_arn" else "")]
    m = re.fullmatch(r"\$\{aws_dynamodb_table\.(\w+)\.arn\}/index/([\w-]+)", text)
    if m:
        rname, index = m.groups()
        name = short(named(RESOURCES[("aws_dynamodb_table", rname)]["name"]))
        assert index in gsis(name), (name, index)
        return [f"table/{name}/index/{index}"]
    watched = sorted(variable_default("controller_tables"))
    if text == (
        "${concat([for t in local.watched_tables : t.arn], flatten([for t in local.watched_tables : "
        '[for g in t.global_secondary_index : "${t.arn}/index/${g.name}"]]))}'
    ):
        return [f"table/{t}" for t in watched] + [f"table/{t}/index/{g}" for t in watched for g in gsis(t)]
    if text == "${[for t in local.watched_tables : t.arn]}":
        assert unq(iam_locals()["watched_tables"]) == "${[for t in keys(var.controller_tables) : local.tables[t]]}"
        return [f"table/{t}" for t in watched]
    if text == "${local.managed_rules}":
        formula = unq(iam_locals()["managed_rules"])
        assert formula == (
            '${flatten([for t in keys(var.controller_tables) : [for kind in ["PKC", "PKT"] : '
            '"${local.insight_rule_arn_prefix}DynamoDBContributorInsights-${kind}-${var.prefix}${t}-*"]])}'
        ), formula
        return [f"insight-rule/DynamoDBContributorInsights-{k}-{PREFIX}{t}-*" for t in watched for k in ["PKC", "PKT"]]
    raise AssertionError(f"unexpected Resource expression {text!r}: teach test_grants.py to resolve it")


def statement(st, mode):
    """A statement of local.policies, references to other locals resolved."""
    block = iam_locals()
    if isinstance(st, str):
        ref = unq(st)
        if ref == "${local.aggregator_source_statement[var.like_events_source]}":
            return block["aggregator_source_statement"][f'"{mode}"']
        m = re.fullmatch(r"\$\{local\.(\w+)\}", ref)
        assert m and m.group(1) in block, ref
        return block[m.group(1)]
    return st


def granted(fn, mode):
    out = set()
    for st in iam_locals()["policies"][f'"{fn}"']:
        st = statement(st, mode)
        assert unq(st["Effect"]) == "Allow"
        assert "Condition" not in st
        for res in logical(st["Resource"]):
            for action in st["Action"]:
                out.add(f"{unq(action)} {res}")
    return sorted(out)


@pytest.mark.parametrize("mode", LIKE_EVENTS_SOURCES)
@pytest.mark.parametrize("fn", FUNCTIONS)
def test_grants_are_exactly_the_calls(fn, mode):
    want, have = expected(fn, mode), granted(fn, mode)
    assert {"missing": [g for g in want if g not in have], "unused": [g for g in have if g not in want]} == {
        "missing": [],
        "unused": [],
    }


def test_every_role_policy_is_its_log_stream_plus_the_policies():
    policy = RESOURCES[("aws_iam_role_policy", "function")]
    assert "concat([local.logs_statement[each.key]], local.policies[each.key])" in unq(policy["policy"])
    logs = iam_locals()["logs_statement"]
    assert "logs:CreateLogStream" in json.dumps(logs) and "aws_cloudwatch_log_group.function[name].arn" in json.dumps(logs)
    assert sorted(unq(k) for k in iam_locals()["policies"]) == sorted(FUNCTIONS)

"""Parser-level checks of the Terraform module (python-hcl2, a real HCL2 parser).

No registry here ships the AWS provider, so `terraform validate` cannot run everywhere; this test
runs everywhere and checks what validate cannot: the tables and stream agree with the Rust schema
(`heatsink schema --json`, exported to infra/build/schema.json by `make -C infra schema`), and the
module holds the same resources as the CDK app.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from hcl import Mod, clean, unq

MODULE = Path(__file__).resolve().parent.parent
REPO = MODULE.parent.parent


def load_schema():
    path = Path(os.environ.get("HEATSINK_SCHEMA_JSON") or REPO / "infra" / "build" / "schema.json")
    if path.exists():
        return json.loads(path.read_text())
    binary = REPO / "target" / "debug" / "heatsink"
    if binary.exists():
        return json.loads(subprocess.check_output([str(binary), "schema", "--json"], text=True))
    raise RuntimeError(f"no schema: run `make -C infra schema` (writes {path}) or build heatsink-cli")


SCHEMA = load_schema()
ROOT = Mod(MODULE)
COUNTER = ROOT.call("counter")
GUARD = ROOT.call("guard")
LEASES = ROOT.call("leases")
BLOCKS = {"": ROOT, "counter": COUNTER, "guard": GUARD, "leases": LEASES}
FILES = ROOT.files
PARSED = ROOT.parsed
# Resources of the root and of every block the root calls, by (type, name); the blocks' own
# functions and queues are `../function` and `../failure-queue` calls.
RESOURCES = {
    (rtype, f"{block}.{rname}" if block else rname): body
    for block, mod in BLOCKS.items()
    for (rtype, rname), body in mod.resources.items()
}


def block_of(key):
    """The module instance a RESOURCES key belongs to."""
    return BLOCKS[key.split(".")[0]] if "." in key else ROOT


def variable_default(name):
    return ROOT.var_value(name)


def variable_body(name):
    return ROOT.variables[name]


LIKE_EVENTS_SOURCES = ["kinesis", "dynamodb-streams"]
CONDITIONAL_COUNT = re.compile(r'^\$\{var\.like_events_source == "([a-z-]+)" \? 1 : 0\}$')


def instances(body, source):
    """How many instances a resource block has for var.like_events_source = source.

    Only the module's one conditional form is understood: `count = var.like_events_source == "x" ? 1 : 0`.
    """
    if "count" not in body:
        return 1
    m = CONDITIONAL_COUNT.match(unq(body["count"]))
    assert m, f"unexpected count expression {body['count']!r}"
    assert m.group(1) in LIKE_EVENTS_SOURCES
    return 1 if m.group(1) == source else 0


def named(template, mod=ROOT):
    """A name as Terraform would make it with the schema's prefix (the root's default)."""
    return mod.text(template)


def test_every_file_parses_and_module_is_not_empty():
    assert {"tables.tf", "functions.tf", "main.tf", "alarms.tf", "dashboard.tf"} <= set(FILES)
    assert len(RESOURCES) > 30
    assert sorted(ROOT.calls) == ["alarm_topic", "async_failures", "autopilot", "counter", "guard", "leases", "likes_api"]


def test_prefix_default_is_the_schema_prefix():
    assert variable_default("prefix") == SCHEMA["prefix"]


def test_exactly_the_schema_tables():
    tables = {named(body["name"], block_of(k)) for (rtype, k), body in RESOURCES.items() if rtype == "aws_dynamodb_table"}
    assert tables == {t["name"] for t in SCHEMA["tables"]}


def table_body(schema_table):
    for (rtype, key), body in RESOURCES.items():
        if rtype == "aws_dynamodb_table" and named(body["name"], block_of(key)) == schema_table["name"]:
            return key.split(".")[-1], body
    raise KeyError(schema_table["name"])


@pytest.mark.parametrize("table", SCHEMA["tables"], ids=lambda t: t["name"])
def test_table_agrees_with_schema(table):
    rname, body = table_body(table)
    assert rname == table["table"]
    assert unq(body["billing_mode"]) == "PAY_PER_REQUEST"
    assert unq(body["hash_key"]) == table["partition_key"]["name"]
    assert unq(body.get("range_key")) == (table["sort_key"] or {}).get("name")

    keys = [table["partition_key"], table["sort_key"]]
    for g in table["gsis"]:
        keys += [g["partition_key"], g["sort_key"]]
    expected_attrs = {k["name"]: k["type"] for k in keys if k}
    attrs = {unq(a["name"]): unq(a["type"]) for a in body.get("attribute", [])}
    assert attrs == expected_attrs

    gsis = [
        {"name": unq(g["name"]), "pk": unq(g["hash_key"]), "sk": unq(g.get("range_key"))}
        for g in body.get("global_secondary_index", [])
    ]
    assert gsis == [
        {"name": g["name"], "pk": g["partition_key"]["name"], "sk": (g["sort_key"] or {}).get("name")}
        for g in table["gsis"]
    ]

    if table["stream"]:
        assert body.get("stream_enabled") is True
        assert unq(body["stream_view_type"]) == table["stream"]
    else:
        assert not body.get("stream_enabled")
        assert "stream_view_type" not in body

    ttl = body.get("ttl", [])
    if table["ttl_attribute"]:
        assert [(unq(t["attribute_name"]), t["enabled"]) for t in ttl] == [(table["ttl_attribute"], True)]
    else:
        assert ttl == []


# The one definition of the aggregator's mapping and like-events (read by esm.tf, the CDK app and
# the Rust code); parsed here on its own.
ESM = json.loads((REPO / "infra" / "esm.json").read_text())


def resolve_esm(value):
    """`${local.esm.x}` and the module's provisioned-or-null shard form, resolved from esm.json."""
    text = unq(value)
    provisioned = '${local.esm.stream_mode == "PROVISIONED" ? local.esm.shards : null}'
    if text == provisioned:
        return ESM["shards"] if ESM["stream_mode"] == "PROVISIONED" else None
    m = re.fullmatch(r"\$\{local\.esm\.(\w+)\}", str(text))
    assert m, f"{text!r} does not read local.esm"
    return ESM[m.group(1)]


def test_esm_local_decodes_the_shared_file():
    (block,) = [b for b in PARSED["esm.tf"]["locals"] if "esm" in b]
    assert unq(block["esm"]) == '${jsondecode(file("${path.module}/../esm.json"))}'


def test_exactly_the_schema_streams():
    streams = {
        named(body["name"]): resolve_esm(body["shard_count"])
        for (rtype, _), body in RESOURCES.items()
        if rtype == "aws_kinesis_stream"
    }
    assert streams == {s["name"]: s["shards"] for s in SCHEMA["streams"]}
    body = RESOURCES[("aws_kinesis_stream", "like_events")]
    assert resolve_esm(body["stream_mode_details"][0]["stream_mode"]) == ESM["stream_mode"]


def test_like_events_source_variable_defaults_to_kinesis_and_is_validated():
    # A variable's default cannot read a file: it must equal the shared definition's source.
    assert variable_default("like_events_source") == "kinesis" == ESM["source"]
    validation = variable_body("like_events_source")["validation"][0]
    condition = unq(validation["condition"])
    for source in LIKE_EVENTS_SOURCES:
        assert f'"{source}"' in condition
    assert "var.like_events_source" in condition


@pytest.mark.parametrize("source", LIKE_EVENTS_SOURCES)
def test_liked_changes_flow_to_like_events_only_with_the_kinesis_source(source):
    dest = RESOURCES[("aws_dynamodb_kinesis_streaming_destination", "liked")]
    assert unq(dest["table_name"]) == "${aws_dynamodb_table.liked.name}"
    assert unq(dest["stream_arn"]) == "${aws_kinesis_stream.like_events.arn}"
    assert instances(dest, source) == (1 if source == "kinesis" else 0)
    # The stream and the table's own change stream stay in both modes.
    assert instances(RESOURCES[("aws_kinesis_stream", "like_events")], source) == 1
    assert RESOURCES[("aws_dynamodb_table", "liked")]["stream_enabled"] is True


def test_liked_is_insert_only_for_every_principal_as_in_the_cdk_stack():
    policy = RESOURCES[("aws_dynamodb_resource_policy", "liked_insert_only")]
    assert unq(policy["resource_arn"]) == "${aws_dynamodb_table.liked.arn}"
    doc = jsonencoded(policy["policy"], ROOT)
    [st] = doc["Statement"]
    assert {k: st[k] for k in ("Sid", "Effect", "Principal", "Resource")} == {
        "Sid": "InsertOnly",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Resource": "${aws_dynamodb_table.liked.arn}",
    }
    cdk = (REPO / "infra/cdk/lib/heatsink-stack.ts").read_text()
    denied = re.search(r"INSERT_ONLY_DENIED = \[(.*?)\]", cdk, re.S).group(1)
    assert sorted(st["Action"]) == sorted(re.findall(r"'(dynamodb:[A-Za-z]+)'", denied))
    # No other table has a resource policy.
    assert [k for k in RESOURCES if k[0] == "aws_dynamodb_resource_policy"] == [("aws_dynamodb_resource_policy", "liked_insert_only")]


def test_contributor_insights_on_every_table_and_gsi():
    ci = GUARD.resources[("aws_dynamodb_contributor_insights", "this")]
    assert unq(ci["for_each"]) == '${{for k, t in local.targets : k => t if t.mode != ""}}'
    # Every table and GSI of the schema is watched: the guard's own directory plus the tables it is given.
    tables = {GUARD.caller.text(t["name"]): t.get("indexes", []) for t in GUARD.tables().values()}
    tables[GUARD.text(GUARD.resources[("aws_dynamodb_table", "hotkeys")]["name"])] = []
    assert tables == {t["name"]: [g["name"] for g in t["gsis"]] for t in SCHEMA["tables"]}
    targets = unq(GUARD.locals["targets"])
    assert "for i in t.indexes" in targets and "for k, t in local.tables" in targets


def test_contributor_insights_mode_per_table_and_gsi():
    """Accessed and throttled keys where the controller acts (it reads that rule), throttled keys
    elsewhere; the same modes as the CDK stack (heatsink.test.ts)."""
    ci = clean(GUARD.resources[("aws_dynamodb_contributor_insights", "this")])
    assert ci["mode"] == "${each.value.mode}"
    rule = '${t.contributor_insights == null ? (t.hot == null ? "THROTTLED_KEYS" : "ACCESSED_AND_THROTTLED_KEYS") : t.contributor_insights}'
    assert unq(GUARD.locals["targets"]).count(rule.strip("${}")) == 2  # tables and their GSIs
    assert variable_default("contributor_insights_mode") is None
    modes = {}
    for t in GUARD.tables().values():
        given = ROOT.value(t["contributor_insights"])
        mode = given or ("THROTTLED_KEYS" if ROOT.value(t["hot"]) is None else "ACCESSED_AND_THROTTLED_KEYS")
        name = ROOT.text(t["name"])
        modes[name] = mode
        for i in t.get("indexes", []):
            modes[f"{name}/{i}"] = mode
    modes[f"{SCHEMA['prefix']}hotkeys"] = ROOT.value(ROOT.calls["guard"]["directory_contributor_insights"])
    p = SCHEMA["prefix"]
    assert modes == {
        f"{p}liked": "THROTTLED_KEYS",
        f"{p}liked/by-post": "THROTTLED_KEYS",
        f"{p}counters": "ACCESSED_AND_THROTTLED_KEYS",
        f"{p}counters/touched": "ACCESSED_AND_THROTTLED_KEYS",
        f"{p}hotkeys": "THROTTLED_KEYS",
        f"{p}leases": "THROTTLED_KEYS",
        f"{p}posts": "THROTTLED_KEYS",
        f"{p}posts/by-creator": "THROTTLED_KEYS",
        f"{p}autopilot": "THROTTLED_KEYS",
    }


def test_the_provider_constraint_covers_the_contributor_insights_mode():
    """`mode` needs hashicorp/aws 6.11: every configuration that instantiates the guard says so."""
    for path in (MODULE / "versions.tf", MODULE / "modules" / "hot-key-guard" / "main.tf", MODULE / "examples" / "orders" / "main.tf"):
        assert re.search(r'version\s*=\s*">= 6\.11"', path.read_text()), path
    stale = [p for p in MODULE.rglob("*.tf") if ".venv" not in p.parts and "no `mode`" in p.read_text()]
    assert stale == []


# The CDK app's resources (infra/cdk/test/heatsink.test.ts), as Terraform resource blocks, counted
# over the root and every module instance it creates (a for_each block counts once).
SAME_AS_CDK = {
    "aws_dynamodb_table": 6,  # AWS::DynamoDB::GlobalTable x6 (liked, posts, autopilot; counters, hotkeys, leases in the blocks)
    "aws_dynamodb_kinesis_streaming_destination": 1,  # KinesisStreamSpecification on liked
    "aws_dynamodb_resource_policy": 1,  # ResourcePolicy on liked's replica (InsertOnly)
    "aws_dynamodb_contributor_insights": 1,  # ContributorInsightsSpecification (for_each: tables + GSIs)
    "aws_kinesis_stream": 1,
    "aws_lambda_function": 5,  # one ../function instance per function
    "aws_cloudwatch_log_group": 6,  # the five functions + API access logs
    "aws_iam_role": 6,  # the five functions + the sampler publisher role
    "aws_iam_role_policy": 7,  # the five functions, the sampler publisher; leases' consumer policy (for_each, none here)
    "aws_lambda_event_source_mapping": 1,  # exactly one, on var.like_events_source
    "aws_lambda_function_event_invoke_config": 3,  # count-rebuilder, hotkey-controller, autopilot
    "aws_sqs_queue": 2,  # stream-failures, async-failures (the blocks' own async queues are off: the root shares one)
    "aws_sqs_queue_policy": 2,
    "aws_cloudwatch_event_bus": 1,  # heatsink-control
    "aws_cloudwatch_event_bus_policy": 1,
    "aws_cognito_user_pool": 1,  # count: unless var.jwt_issuer
    "aws_cognito_user_pool_client": 1,
    "aws_apigatewayv2_authorizer": 1,
    "aws_kms_key": 3,  # the alarm topic's; one per failure queue (stream-failures, async-failures)
    "aws_kms_alias": 3,
    "aws_cloudwatch_event_rule": 5,  # count-rebuilder schedule; hotkey-controller schedule, alarms, sampler reports; autopilot schedule
    "aws_cloudwatch_event_target": 3,  # the rebuilder's; the controller's (for_each over its three rules); the autopilot's
    "aws_lambda_permission": 4,  # rebuilder, controller (for_each), autopilot, API
    "aws_apigatewayv2_api": 1,
    "aws_apigatewayv2_integration": 1,
    "aws_apigatewayv2_route": 2,
    "aws_apigatewayv2_stage": 1,
    "aws_cloudwatch_contributor_insight_rule": 1,  # for_each over the rules
    # the counter's (for_each); the guard's hot, throttled, controller (for_each each); the app's
    # own (for_each), the API's p99 and the autopilot's (for_each)
    "aws_cloudwatch_metric_alarm": 7,
    "aws_sns_topic": 1,
    "aws_sns_topic_policy": 1,
    "aws_cloudwatch_dashboard": 1,
}


def instantiated(mod):
    """Resource blocks of a module instance and of every module it calls (a call with `count` that
    the caller's arguments switch off, the blocks' own async queues here, counts as none)."""
    counts = {}
    for rtype, _ in mod.resources:
        counts[rtype] = counts.get(rtype, 0) + 1
    for name, body in mod.calls.items():
        if "count" in body:
            assert unq(body["count"]) == "${local.own_async ? 1 : 0}", body["count"]
            if mod.var("async_failures_queue")[1] is not None:
                continue
        for rtype, n in instantiated(mod.call(name)).items():
            counts[rtype] = counts.get(rtype, 0) + n
    return counts


def test_same_resource_list_as_the_cdk_app():
    assert instantiated(ROOT) == SAME_AS_CDK


def function_calls():
    """(scope, call body) of every `../function` instance, by binary."""
    out = {}
    for mod in BLOCKS.values():
        for name, body in mod.calls.items():
            if unq(body["source"]).endswith("function"):
                out[unq(body["binary"])] = (mod, clean(body))
    return out


def test_five_functions_arm64_by_default():
    assert sorted(function_calls()) == sorted(["likes-api", "likes-aggregator", "count-rebuilder", "hotkey-controller", "autopilot"])
    fn = Mod(MODULE / "modules" / "function").resources[("aws_lambda_function", "this")]
    assert unq(fn["runtime"]) == "provided.al2023"
    assert unq(fn["handler"]) == "bootstrap"
    assert fn["architectures"] == ["${var.architecture}"]
    assert unq(fn["filename"]) == "${var.lambda_dir}/${var.binary}/bootstrap.zip"
    assert variable_default("architecture") == "arm64"
    for binary, (mod, body) in function_calls().items():
        assert mod.value(body["architecture"]) == "arm64", binary
        assert mod.text(body["function_name"]) == f"{SCHEMA['prefix']}{binary}"


def esm_of(source):
    """The aggregator's event source mappings: the counter's one mapping, its ARN resolved for `source`."""
    root = Mod(MODULE, root_vars={"like_events_source": source})
    counter = root.call("counter")
    mappings = {k: b for (t, k), b in counter.resources.items() if t == "aws_lambda_event_source_mapping"}
    return counter, mappings


@pytest.mark.parametrize("source", [variable_default("like_events_source"), *LIKE_EVENTS_SOURCES])
def test_aggregator_has_exactly_one_event_source_mapping(source):
    """The table's stream and like-events carry the same changes: two mappings would count every like twice."""
    counter, mappings = esm_of(source)
    assert list(mappings) == ["aggregator"]
    body = mappings["aggregator"]
    assert "count" not in body and "for_each" not in body
    assert unq(body["function_name"]) == "${module.aggregator.arn}"
    expected = {"kinesis": ["stream/like-events"], "dynamodb-streams": ["table/liked/stream"]}[source]
    assert counter.logical(body["event_source_arn"], SCHEMA["prefix"]) == expected


def test_default_source_is_kinesis_with_one_mapping():
    default = variable_default("like_events_source")
    assert default == "kinesis"
    counter, mappings = esm_of(default)
    assert counter.var_value("source_kind") == "kinesis"
    assert len(mappings) == 1


@pytest.mark.parametrize("source", LIKE_EVENTS_SOURCES)
def test_aggregator_reads_only_the_chosen_source(source):
    counter, _ = esm_of(source)
    statements = counter.function_statements("aggregator")
    actions = [a for st in statements for a in st["Action"]]
    kinesis_reads = [a for a in actions if a.startswith("kinesis:")]
    stream_reads = [a for a in actions if a in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams")]
    resources_read = {
        r for st in statements if any(a in kinesis_reads + stream_reads for a in st["Action"]) for r in counter.logical(st["Resource"], SCHEMA["prefix"])
    }
    if source == "kinesis":
        assert {"kinesis:GetRecords", "kinesis:GetShardIterator"} <= set(kinesis_reads)
        assert stream_reads == []
        assert resources_read == {"stream/like-events"}
    else:
        assert {"dynamodb:GetRecords", "dynamodb:GetShardIterator"} <= set(stream_reads)
        assert kinesis_reads == []
        assert resources_read == {"table/liked/stream"}


def test_aggregator_event_source():
    esm = clean(COUNTER.resources[("aws_lambda_event_source_mapping", "aggregator")])
    assert esm["function_name"] == "${module.aggregator.arn}"
    assert esm["function_response_types"] == ["ReportBatchItemFailures"]
    assert esm["bisect_batch_on_function_error"] is True
    assert esm["parallelization_factor"] == 1
    # Batch size and window come from infra/esm.json through the root's call.
    assert resolve_esm(ROOT.calls["counter"]["batch_size"]) == ESM["batch_size"]
    assert resolve_esm(ROOT.calls["counter"]["window_seconds"]) == ESM["window_seconds"]
    assert COUNTER.logical(esm["destination_config"][0]["on_failure"][0]["destination_arn"], SCHEMA["prefix"]) == ["queue/stream-failures"]
    # Its own EventCount metrics, and alarms on the events it dropped or parked.
    assert esm["metrics_config"][0]["metrics"] == ["EventCount"]
    alarms = clean(COUNTER.locals["counter_alarms"])
    for name, metric in (("likes-aggregator-dropped-events", "DroppedEventCount"), ("likes-aggregator-parked-events", "OnFailureDestinationDeliveredEventCount")):
        assert (alarms[name]["namespace"], alarms[name]["metric"], alarms[name]["stat"], alarms[name]["threshold"]) == ("AWS/Lambda", metric, "Sum", 1)
        assert alarms[name]["dims"] == {"EventSourceMappingUUID": "${aws_lambda_event_source_mapping.aggregator.uuid}"}


def test_schedules_and_alarm_rule():
    assert unq(COUNTER.resources[("aws_cloudwatch_event_rule", "schedule")]["schedule_expression"]) == "rate(5 minutes)"
    assert GUARD.resources[("aws_cloudwatch_event_rule", "schedule")]["schedule_expression"]
    pattern = unq(GUARD.resources[("aws_cloudwatch_event_rule", "alarms")]["event_pattern"])
    # Exact alarm names, never a prefix (`heatsink-` would also match `heatsink-staging-`).
    assert "CloudWatch Alarm State Change" in pattern and "aws.cloudwatch" in pattern
    assert "alarmName = local.hot_key_alarm_names" in pattern and "prefix" not in pattern


def plain_locals(mod=GUARD):
    """Module locals whose value is a plain string literal, by name."""
    return {name: unq(v) for name, v in mod.locals.items() if isinstance(v, str) and v.startswith('"') and "${" not in v}


def jsonencoded(expression, mod=GUARD):
    """The value of a `jsonencode({...})` attribute, keys and strings unquoted, `local.x` literals resolved."""
    import hcl2

    text = unq(expression)
    assert text.startswith("${jsonencode(") and text.endswith(")}"), text
    value = hcl2.loads("v = " + text[len("${jsonencode(") : -len(")}")])["v"]
    known = plain_locals(mod)

    def norm(v):
        if isinstance(v, dict):
            return {unq(k): norm(x) for k, x in v.items() if k != "__is_block__"}
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, str):
            m = re.fullmatch(r"\$\{local\.([a-z_]+)\}", v)
            return known[m.group(1)] if m and m.group(1) in known else unq(v)
        return v

    return norm(value)


def test_sampler_reports_rule_on_the_control_bus_targets_the_controller():
    rule = GUARD.resources[("aws_cloudwatch_event_rule", "sampler_reports")]
    assert named(rule["name"], GUARD) == f"{SCHEMA['prefix']}hotkey-controller-sampler-reports"
    assert unq(rule["event_bus_name"]) == "${aws_cloudwatch_event_bus.control.name}"  # never the default bus
    assert named(GUARD.resources[("aws_cloudwatch_event_bus", "control")]["name"], GUARD) == f"{SCHEMA['prefix']}control"
    assert jsonencoded(rule["event_pattern"]) == {
        "source": ["heatsink.sampler"],
        "detail-type": ["heatsink hot-key report"],
    }
    # Target and invoke permission both come from local.event_rules.
    rules = clean(GUARD.locals["event_rules"])
    assert rules["sampler_reports"] == {
        "name": "${aws_cloudwatch_event_rule.sampler_reports.name}",
        "arn": "${aws_cloudwatch_event_rule.sampler_reports.arn}",
        "bus": "${aws_cloudwatch_event_bus.control.name}",
    }
    target = GUARD.resources[("aws_cloudwatch_event_target", "controller")]
    assert unq(target["for_each"]) == "${local.event_rules}"
    assert unq(target["arn"]) == "${module.controller.arn}"
    assert unq(target["event_bus_name"]) == "${each.value.bus}"
    permission = GUARD.resources[("aws_lambda_permission", "controller")]
    assert unq(permission["for_each"]) == "${local.event_rules}"
    assert unq(permission["action"]) == "lambda:InvokeFunction"
    assert unq(permission["principal"]) == "events.amazonaws.com"
    assert unq(permission["source_arn"]) == "${each.value.arn}"


def test_sampler_publisher_role_may_put_on_the_control_bus_for_the_sampler_source_only():
    assert not [t for (t, _) in RESOURCES if t == "aws_iam_policy"]
    role = GUARD.resources[("aws_iam_role", "sampler_publisher")]
    assert named(role["name"], GUARD) == f"{SCHEMA['prefix']}sampler-publisher"
    policy = GUARD.resources[("aws_iam_role_policy", "sampler_publisher")]
    assert unq(policy["role"]) == "${aws_iam_role.sampler_publisher.id}"
    assert jsonencoded(policy["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "events:PutEvents",
                "Resource": "${aws_cloudwatch_event_bus.control.arn}",
                "Condition": {"StringEquals": {"events:source": "heatsink.sampler"}},
            }
        ],
    }
    assert unq(ROOT.outputs["sampler_publisher_role_arn"]["value"]) == "${module.guard.sampler_publisher_role_arn}"
    assert unq(GUARD.outputs["sampler_publisher_role_arn"]["value"]) == "${aws_iam_role.sampler_publisher.arn}"


def test_the_control_bus_denies_put_events_to_every_principal_but_the_publisher_role():
    policy = GUARD.resources[("aws_cloudwatch_event_bus_policy", "control")]
    assert unq(policy["event_bus_name"]) == "${aws_cloudwatch_event_bus.control.name}"
    assert jsonencoded(policy["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "OnlyTheSamplerPublisher",
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Action": "events:PutEvents",
                "Resource": "${aws_cloudwatch_event_bus.control.arn}",
                "Condition": {"ArnNotEquals": {"aws:PrincipalArn": "${aws_iam_role.sampler_publisher.arn}"}},
            }
        ],
    }


def test_count_rebuilder_may_call_exactly_what_rebuild_calls():
    # Same table-level grant as the CDK stack's (the index Queries are checked by test_grants.py):
    # GetItem/Query/PutItem/UpdateItem/DeleteItem of counters (touched rows' buckets, watermarks,
    # lease, cursor, fixes) and Scan of counters (the sweep's pages); the events table is never
    # scanned.
    grants = {}
    for st in COUNTER.function_statements("rebuilder"):
        for res in COUNTER.logical(st["Resource"], SCHEMA["prefix"]):
            if res.startswith("table/") and "/index/" not in res:
                grants.setdefault(res, []).extend(st["Action"])
    assert {k: sorted(v) for k, v in grants.items()} == {
        "table/counters": ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:Scan", "dynamodb:UpdateItem"]
    }


def test_http_api_routes():
    routes = sorted(unq(b["route_key"]) for (t, _), b in RESOURCES.items() if t == "aws_apigatewayv2_route")
    assert routes == ["GET /posts/{post}", "POST /posts/{post}/likes"]


def all_statements():
    """Every statement of every function role and of the lease consumer's policy."""
    out = [st for mod, body in function_calls().values() for st in mod.function_statements(next(k for k, b in mod.calls.items() if clean(b) == body))]
    out += clean(LEASES.locals["consumer_statements"]) if isinstance(LEASES.locals["consumer_statements"], list) else []
    return out


def test_no_wildcard_actions_and_no_star_resource():
    statements = all_statements()
    assert len(statements) >= 12
    for st in statements:
        assert all("*" not in a for a in st["Action"]), st
        # The one "*": X-Ray's two actions, which take no resource.
        assert st["Resource"] != "*" or sorted(st["Action"]) == ["xray:PutTelemetryRecords", "xray:PutTraceSegments"], st
    text = (MODULE / "modules" / "stream-leases" / "main.tf").read_text()
    assert '"*"' not in text


def test_alarms_on_insight_rule_max_contributor_and_throttle_reasons():
    hot = GUARD.resources[("aws_cloudwatch_metric_alarm", "hot_partition")]
    expression = unq(hot["metric_query"][0]["expression"])
    assert "INSIGHT_RULE_METRIC('${each.key}', 'MaxContributorValue')" in expression
    assert unq(hot["threshold"]) == "${var.hot_partition_fraction * each.value.ceiling}"
    assert unq(GUARD.calls and ROOT.calls["guard"]["hot_partition_fraction"]) == "${var.hot_partition_fraction}"
    text = GUARD.files["alarms.tf"].read_text()
    for metric in ("ReadKeyRangeThroughputThrottleEvents", "WriteKeyRangeThroughputThrottleEvents", "WriteAccountLimitThrottleEvents"):
        assert metric in text


def dashboard_text():
    return "\n".join(
        p.read_text() for p in [FILES["dashboard.tf"], FILES["autopilot.tf"], GUARD.files["outputs.tf"], COUNTER.files["outputs.tf"], COUNTER.files["main.tf"]]
    )


def test_dashboard_widgets():
    text = dashboard_text()
    for needle in ("MaxContributorValue", "per-partition ceiling", "insightRule", "CounterLagEvents", "IteratorAge", "LeasesHeld", "CounterCorrectionLikes"):
        assert needle in text
    body = unq(ROOT.resources[("aws_cloudwatch_dashboard", "overview")]["dashboard_body"])
    for part in ("module.guard.dashboard_widgets", "module.counter.dashboard_widgets", "local.autopilot_widgets", "local.app_widgets", "local.alarm_widget"):
        assert part in body
    assert "aws_cloudwatch_metric_alarm.autopilot" in str(ROOT.locals["alarm_widget"])


def test_every_emf_metric_of_the_catalogue_is_graphed_with_its_emitter():
    """The CDK app's catalogue (observability.ts EMF_METRICS) is graphed here too, each series
    with the `Function` dimension of its one emitter, as the CDK dashboard test requires there."""
    catalogue = re.search(r"export const EMF_METRICS = \{(.*?)\} as const;", (REPO / "infra/cdk/lib/observability.ts").read_text(), re.S).group(1)
    metrics = re.findall(r"^\s+\w+: '(\w+)',$", catalogue, re.M)
    assert "AutopilotPeriodCompleted" in metrics and len(metrics) >= 20
    graphed = {m: e for m, e in re.findall(r'"heatsink", "(\w+)", "Function", "([\w-]+)"', dashboard_text())}
    assert sorted(graphed) == sorted(metrics)
    for m in metrics:
        if m.startswith("Autopilot"):
            assert graphed[m] == "autopilot", m


def series(mod, widgets):
    """The series of widgets (a list of objects), `${local.x.y}` references resolved in `mod`."""
    out = {}
    for w in widgets:
        metrics = w["properties"].get("metrics")
        if isinstance(metrics, str) and re.fullmatch(r"\$\{local\.\w+\}", metrics):
            metrics = mod.locals[metrics[len("${local.") : -1]]
        if not isinstance(metrics, list):
            continue
        rows = []
        for m in metrics:
            if isinstance(m, str):
                path = unq(m).removeprefix("${local.").removesuffix("}").split(".")
                m = mod.locals
                for key in path:
                    m = m[key]
            rows.append([unq(v) if isinstance(v, str) else {k: unq(x) for k, x in v.items()} for v in m])
        out[unq(w["properties"]["title"])] = rows
    return out


def widget_series(title):
    """The series of the widget titled `title`, wherever it is defined (the app or a block)."""
    found = {}
    found.update(series(ROOT, ROOT.locals["app_widgets"]))
    found.update(series(ROOT, ROOT.locals["autopilot_widgets"]))
    found.update(series(COUNTER, COUNTER.outputs["dashboard_widgets"]["value"]))
    guard_widgets = GUARD.outputs["dashboard_widgets"]["value"]
    if isinstance(guard_widgets, str):
        import hcl2

        inner = unq(guard_widgets)
        last = inner[inner.rindex("[{") : inner.rindex("}]") + 2]
        found.update(series(GUARD, hcl2.loads("v = " + last)["v"]))
    return found[title]


def test_dashboard_leases_come_from_stream_consumers():
    """No function holds a lease; `heatsink tail --emf` and embedding services emit these."""
    assert widget_series("Stream consumer leases (heatsink tail --emf or an embedding service)") == [
        ["heatsink", "LeasesHeld", "Function", "stream-consumer", {"stat": "Maximum", "label": "held (max per worker)"}],
        ["heatsink", "LeasesExpired", "Function", "stream-consumer", {"stat": "Sum", "label": "expired, taken over"}],
    ]


def test_dashboard_hot_keys_vs_sampler_reports_the_rule_matched():
    """Routers publish sampler reports; EventBridge's MatchedEvents for the rule counts them."""
    assert widget_series("Hot keys: directory vs sampler reports delivered") == [
        ["heatsink", "HotKeys", "Function", "hotkey-controller", {"stat": "Maximum", "label": "keys in the directory"}],
        [
            "AWS/Events",
            "MatchedEvents",
            "RuleName",
            "${aws_cloudwatch_event_rule.sampler_reports.name}",
            {"stat": "Sum", "label": "sampler reports delivered", "yAxis": "right"},
        ],
    ]
    text = dashboard_text()
    assert "SampledHotKeys" not in text
    # count-rebuilder is graphed for its own corrections only, never for hot keys.
    rebuilder_series = [line for line in text.splitlines() if '"Function", "count-rebuilder"' in line]
    assert sorted(re.search(r'"heatsink", "(\w+)"', line).group(1) for line in rebuilder_series) == [
        "CounterCorrectionLikes",
        "CounterRebuildCompleted",
        "CounterRebuildLagging",
        "CounterRepairBlocked",
        "CounterRepairLag",
        "CountersCorrected",
        "CountersUnsettled",
    ]


def test_dashboard_counter_corrections_per_rebuilder_run():
    """One datapoint per 5-minute count-rebuilder run, the same series as the CDK dashboard."""
    title = "Counter corrections (count-rebuilder)"
    assert widget_series(title) == [
        ["heatsink", "CounterCorrectionLikes", "Function", "count-rebuilder", {"stat": "Sum", "label": "likes corrected"}],
        ["heatsink", "CountersCorrected", "Function", "count-rebuilder", {"stat": "Sum", "label": "counters corrected"}],
        ["heatsink", "CountersUnsettled", "Function", "count-rebuilder", {"stat": "Maximum", "label": "counters unsettled", "yAxis": "right"}],
        ["heatsink", "CounterRebuildCompleted", "Function", "count-rebuilder", {"stat": "Sum", "label": "runs completed", "yAxis": "right"}],
    ]
    widget = next(w for w in COUNTER.outputs["dashboard_widgets"]["value"] if unq(w["properties"]["title"]) == title)
    assert widget["properties"]["period"] == 300


def test_dashboard_repair_progress_per_rebuilder_run():
    """The repair's lag (with the repair-lag alarm's line), blocked runs and lagging checks: the CDK dashboard's series."""
    title = "Counter repair progress (count-rebuilder)"
    assert widget_series(title) == [
        ["heatsink", "CounterRepairLag", "Function", "count-rebuilder", {"stat": "Maximum", "label": "proven progress behind (s)"}],
        ["heatsink", "CounterRepairBlocked", "Function", "count-rebuilder", {"stat": "Maximum", "label": "run blocked", "yAxis": "right"}],
        ["heatsink", "CounterRebuildLagging", "Function", "count-rebuilder", {"stat": "Maximum", "label": "checks lagging", "yAxis": "right"}],
    ]
    widget = next(w for w in COUNTER.outputs["dashboard_widgets"]["value"] if unq(w["properties"]["title"]) == title)
    assert widget["properties"]["period"] == 300
    assert clean(widget["properties"]["annotations"]) == {"horizontal": [{"value": 900, "label": "alarm"}]}


def test_dashboard_aggregator_dedupe_counts():
    assert widget_series("Counter dedupe (likes-aggregator): late, shed, duplicates, foreign") == [
        ["heatsink", "CounterLateChanges", "Function", "likes-aggregator", {"stat": "Sum", "label": "late, counted unchecked"}],
        ["heatsink", "CounterDedupeShed", "Function", "likes-aggregator", {"stat": "Sum", "label": "identities shed"}],
        ["heatsink", "CounterDuplicatesDropped", "Function", "likes-aggregator", {"stat": "Sum", "label": "duplicates dropped", "yAxis": "right"}],
        ["heatsink", "CounterForeignRecords", "Function", "likes-aggregator", {"stat": "Sum", "label": "foreign records skipped", "yAxis": "right"}],
    ]


def alarm_entry(mod, local, key):
    """One entry of a module's alarm map (`local.<local>`)."""
    table = clean(mod.locals[local])
    return table[key]


def test_counter_corrections_alarm_fires_on_any_correction():
    alarm = alarm_entry(COUNTER, "counter_alarms", "counter-corrections")
    assert {k: alarm[k] for k in ("namespace", "metric", "stat", "comparison", "missing")} == {
        "namespace": "heatsink",
        "metric": "CounterCorrectionLikes",
        "stat": "Sum",
        "comparison": "GreaterThanThreshold",
        "missing": "notBreaching",
    }
    assert alarm["dims"] == {"Function": "count-rebuilder"}
    assert (alarm["period"], alarm["evaluation"], alarm["threshold"], alarm["datapoints"]) == (300, 1, 0, 1)
    resource = clean(COUNTER.resources[("aws_cloudwatch_metric_alarm", "this")])
    assert resource["alarm_actions"] == ["${var.alarm_topic_arn}"] and resource["ok_actions"] == ["${var.alarm_topic_arn}"]
    assert ROOT.calls["counter"]["alarm_topic_arn"] == "${module.alarm_topic.topic_arn}"
    assert resource["alarm_description"].endswith('Runbook: README \\"Alarms\\".')
    assert "${var.prefix}${k}" in unq(COUNTER.locals["alarms"])
    # On the dashboard's alarm status widget with the others.
    assert "module.counter.alarm_arns" in str(ROOT.locals["alarm_widget"])


# The counter's silent paths that page, as the CDK stack writes them (heatsink.test.ts): a blocked
# or lagging repair (three 5-minute periods in a row), shed dedupe identities and changes counted
# past the dedupe window (any in 5 minutes). Missing data never breaches: the heartbeat covers
# missing runs, and the shed metric is emitted only when above 0.
SILENT_PATH_ALARMS = [
    ("count-rebuilder-blocked", "CounterRepairBlocked", "count-rebuilder", "Maximum", "GreaterThanOrEqualToThreshold", 1, 3),
    ("count-rebuilder-repair-lag", "CounterRepairLag", "count-rebuilder", "Maximum", "GreaterThanThreshold", 900, 3),
    ("likes-aggregator-dedupe-shed", "CounterDedupeShed", "likes-aggregator", "Sum", "GreaterThanThreshold", 0, 1),
    ("likes-aggregator-late-changes", "CounterLateChanges", "likes-aggregator", "Sum", "GreaterThanThreshold", 0, 1),
]


@pytest.mark.parametrize("key,metric,emitter,stat,comparison,threshold,periods", SILENT_PATH_ALARMS, ids=[a[0] for a in SILENT_PATH_ALARMS])
def test_the_counters_silent_paths_alarm(key, metric, emitter, stat, comparison, threshold, periods):
    alarms = clean(COUNTER.locals["counter_alarms"])
    assert key in alarms, f"no {key} alarm in modules/hot-key-counter/alarms.tf"
    alarm = alarms[key]
    assert {k: alarm[k] for k in ("namespace", "metric", "dims", "stat", "period", "comparison", "threshold", "evaluation", "datapoints", "missing")} == {
        "namespace": "heatsink",
        "metric": metric,
        "dims": {"Function": emitter},
        "stat": stat,
        "period": 300,
        "comparison": comparison,
        "threshold": threshold,
        "evaluation": periods,
        "datapoints": periods,
        "missing": "notBreaching",
    }
    # One resource writes every entry of the map: prefixed name, the alarm topic on ALARM and OK.
    resource = clean(COUNTER.resources[("aws_cloudwatch_metric_alarm", "this")])
    assert unq(resource["for_each"]) == "${local.alarms}"
    assert "local.counter_alarms" in unq(COUNTER.locals["alarms"])
    assert resource["alarm_actions"] == ["${var.alarm_topic_arn}"] and resource["ok_actions"] == ["${var.alarm_topic_arn}"]
    assert resource["treat_missing_data"] == "${each.value.missing}"
    assert resource["evaluation_periods"] == "${each.value.evaluation}" and resource["datapoints_to_alarm"] == "${each.value.datapoints}"
    assert ROOT.calls["counter"]["alarm_topic_arn"] == "${module.alarm_topic.topic_arn}"


def test_the_same_silent_path_alarms_as_the_cdk_stack():
    """The CDK block names the same four alarms, on the same metrics (EMF_METRICS)."""
    ts = (REPO / "infra" / "cdk" / "lib" / "blocks" / "hot-key-counter.ts").read_text()
    metrics = (REPO / "infra" / "cdk" / "lib" / "observability.ts").read_text()
    for key, metric, emitter, *_ in SILENT_PATH_ALARMS:
        assert f"alarmName: `${{prefix}}{key}`" in ts, key
        assert f"'{metric}'" in metrics, metric


def test_no_function_reads_or_writes_the_leases_table():
    """Leases are held by stream consumers outside the module, never by a function."""
    for binary, (mod, body) in function_calls().items():
        call = next(k for k, b in mod.calls.items() if clean(b) == body)
        for st in mod.function_statements(call):
            assert "table/leases" not in mod.logical(st["Resource"], SCHEMA["prefix"]), (binary, st)


# The autopilot (autopilot.tf): like-events' control loop, as the CDK app deploys it
# (heatsink.test.ts, "autopilot"). like-events exists with both sources, so the autopilot does too.
AUTOPILOT = ROOT.call("autopilot")


def test_the_autopilot_runs_every_minute_parked_not_retried_one_period_at_a_time():
    call = clean(ROOT.calls["autopilot"])
    assert (call["binary"], ROOT.text(call["function_name"])) == ("autopilot", f"{SCHEMA['prefix']}autopilot")
    assert "count" not in call and "for_each" not in call  # both like-events sources
    assert call["reserved_concurrency"] == '${var.concurrency["autopilot"]}'
    assert variable_default("concurrency")["autopilot"] == 1
    assert call["timeout"] <= 60
    rule = clean(ROOT.resources[("aws_cloudwatch_event_rule", "autopilot")])
    assert (ROOT.text(rule["name"]), rule["schedule_expression"]) == (f"{SCHEMA['prefix']}autopilot-schedule", "rate(1 minute)")
    assert "event_bus_name" not in rule
    target = clean(ROOT.resources[("aws_cloudwatch_event_target", "autopilot")])
    assert (target["rule"], target["arn"]) == ("${aws_cloudwatch_event_rule.autopilot.name}", "${module.autopilot.arn}")
    assert target["retry_policy"] == [{"maximum_retry_attempts": 2, "maximum_event_age_in_seconds": 600}]
    invoke = clean(ROOT.resources[("aws_lambda_function_event_invoke_config", "autopilot")])
    assert (invoke["function_name"], invoke["maximum_retry_attempts"], invoke["maximum_event_age_in_seconds"]) == ("${module.autopilot.function_name}", 0, 60)
    permission = clean(ROOT.resources[("aws_lambda_permission", "autopilot")])
    assert (permission["principal"], permission["source_arn"]) == ("events.amazonaws.com", "${aws_cloudwatch_event_rule.autopilot.arn}")
    # The shared queue's policy lets the schedule park undeliverable events there.
    assert "aws_cloudwatch_event_rule.autopilot.arn" in unq(ROOT.calls["async_failures"]["eventbridge_rule_arns"])


def test_the_autopilot_is_a_dry_run_unless_switched_on():
    assert variable_default("autopilot_act") is False
    assert unq(variable_body("autopilot_act")["type"]) == "${bool}" or variable_body("autopilot_act")["type"] in ("bool", "${bool}")
    env = unq(ROOT.calls["autopilot"]["environment"])
    assert 'HEATSINK_PREFIX = var.prefix' in env and 'HEATSINK_AUTOPILOT_ACT = var.autopilot_act ? "true" : "false"' in env
    assert "local.capacity_log" in env


def test_the_autopilot_state_table():
    table = clean(ROOT.resources[("aws_dynamodb_table", "autopilot")])
    assert (table["hash_key"], table["range_key"], table["billing_mode"]) == ("pk", "sk", "PAY_PER_REQUEST")
    assert table["point_in_time_recovery"] == [{"enabled": True}]
    assert table["deletion_protection_enabled"] is True
    assert "stream_enabled" not in table


# The heartbeat breaches on missing data; the gauges do not (the heartbeat covers missing periods).
AUTOPILOT_ALARMS = [
    ("autopilot-failing", "AutopilotPeriodCompleted", "Sum", "LessThanThreshold", "breaching"),
    ("autopilot-paused", "AutopilotPaused", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching"),
    ("autopilot-out-of-budget", "AutopilotOutOfBudget", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching"),
    ("autopilot-unproven", "AutopilotUnproven", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching"),
]


@pytest.mark.parametrize("key,metric,stat,comparison,missing", AUTOPILOT_ALARMS, ids=[a[0] for a in AUTOPILOT_ALARMS])
def test_the_autopilot_alarms(key, metric, stat, comparison, missing):
    alarm = clean(ROOT.locals["autopilot_alarms"])[key]
    assert {k: alarm[k] for k in ("namespace", "metric", "dims", "stat", "period", "comparison", "threshold", "evaluation", "datapoints", "missing")} == {
        "namespace": "heatsink",
        "metric": metric,
        "dims": {"Function": "autopilot"},
        "stat": stat,
        "period": 300,
        "comparison": comparison,
        "threshold": 1,
        "evaluation": 3,
        "datapoints": 3,
        "missing": missing,
    }
    resource = clean(ROOT.resources[("aws_cloudwatch_metric_alarm", "autopilot")])
    assert resource["for_each"] == "${local.autopilot_alarms}"
    assert resource["alarm_name"] == "${var.prefix}${each.key}"
    assert resource["alarm_actions"] == ["${module.alarm_topic.topic_arn}"] and resource["ok_actions"] == ["${module.alarm_topic.topic_arn}"]
    assert resource["treat_missing_data"] == "${each.value.missing}"
    assert resource["alarm_description"].endswith('Runbook: README \\"Alarms\\".')
    # The CDK app names the same alarm on the same metric.
    ts = (REPO / "infra" / "cdk" / "lib" / "autopilot.ts").read_text()
    assert f"{key}" in ts and f"'{metric}'" in (REPO / "infra" / "cdk" / "lib" / "observability.ts").read_text()


def test_dashboard_the_autopilot_series():
    """The CDK dashboard's series (heatsink.test.ts)."""
    assert widget_series("Autopilot (like-events): periods, proposals, operations, holds") == [
        ["heatsink", "AutopilotPeriodCompleted", "Function", "autopilot", {"stat": "Sum", "label": "periods completed"}],
        ["heatsink", "AutopilotProposals", "Function", "autopilot", {"stat": "Maximum", "label": "proposals"}],
        ["heatsink", "AutopilotOperationsStarted", "Function", "autopilot", {"stat": "Sum", "label": "splits and merges started"}],
        ["heatsink", "AutopilotPaused", "Function", "autopilot", {"stat": "Maximum", "label": "paused", "yAxis": "right"}],
        ["heatsink", "AutopilotOutOfBudget", "Function", "autopilot", {"stat": "Maximum", "label": "waiting on budget", "yAxis": "right"}],
        ["heatsink", "AutopilotUnproven", "Function", "autopilot", {"stat": "Maximum", "label": "unproven in flight", "yAxis": "right"}],
    ]

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

import hcl2
import pytest

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
FILES = {p.name: p for p in sorted(MODULE.glob("*.tf"))}


def unq(value):
    """python-hcl2 keeps string quotes: '"abc"' -> 'abc'."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse(name):
    with open(FILES[name]) as f:
        return hcl2.load(f)


PARSED = {name: parse(name) for name in FILES}


def resources():
    """{(type, name): body} over every file."""
    out = {}
    for doc in PARSED.values():
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                for rname, body in named.items():
                    out[(unq(rtype), unq(rname))] = body
    return out


RESOURCES = resources()


def variable_default(name):
    for doc in PARSED.values():
        for block in doc.get("variable", []):
            for vname, body in block.items():
                if unq(vname) == name:
                    return unq(body.get("default"))
    raise KeyError(name)


def variable_body(name):
    for doc in PARSED.values():
        for block in doc.get("variable", []):
            for vname, body in block.items():
                if unq(vname) == name:
                    return body
    raise KeyError(name)


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


def named(template):
    """Resolve the prefix the way Terraform would with the schema's prefix."""
    return unq(template).replace("${var.prefix}", SCHEMA["prefix"])


def test_every_file_parses_and_module_is_not_empty():
    assert {"tables.tf", "functions.tf", "iam.tf", "alarms.tf", "dashboard.tf"} <= set(FILES)
    assert len(RESOURCES) > 30


def test_prefix_default_is_the_schema_prefix():
    assert variable_default("prefix") == SCHEMA["prefix"]


def test_exactly_the_schema_tables():
    tables = {named(body["name"]) for (rtype, _), body in RESOURCES.items() if rtype == "aws_dynamodb_table"}
    assert tables == {t["name"] for t in SCHEMA["tables"]}


def table_body(schema_table):
    for (rtype, rname), body in RESOURCES.items():
        if rtype == "aws_dynamodb_table" and named(body["name"]) == schema_table["name"]:
            return rname, body
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


def test_contributor_insights_on_every_table_and_gsi():
    ci = RESOURCES[("aws_dynamodb_contributor_insights", "tables")]
    assert unq(ci["for_each"]) == "${local.table_targets}"
    text = FILES["tables.tf"].read_text()
    for table in SCHEMA["tables"]:
        assert f"{table['table']} = aws_dynamodb_table.{table['table']}" in re.sub(r"\s+", " ", text)
        for g in table["gsis"]:
            assert f'"{table["table"]}-{g["name"]}" = {{ table = aws_dynamodb_table.{table["table"]}.name, index = "{g["name"]}" }}' in text


# The CDK app's resources (infra/cdk/test/heatsink.test.ts), as Terraform resource types.
SAME_AS_CDK = {
    "aws_dynamodb_table": 5,  # AWS::DynamoDB::GlobalTable x5
    "aws_dynamodb_kinesis_streaming_destination": 1,  # KinesisStreamSpecification on liked
    "aws_dynamodb_contributor_insights": 1,  # ContributorInsightsSpecification (for_each: tables + GSIs)
    "aws_kinesis_stream": 1,
    "aws_lambda_function": 1,  # for_each over the four functions
    "aws_cloudwatch_log_group": 2,  # functions (for_each) + API access logs
    "aws_iam_role": 2,  # for_each + the sampler publisher role
    "aws_iam_role_policy": 2,  # for_each + the sampler publisher's
    "aws_lambda_event_source_mapping": 2,  # two conditional blocks, exactly one instance (var.like_events_source)
    "aws_lambda_function_event_invoke_config": 1,  # for_each: count-rebuilder, hotkey-controller
    "aws_sqs_queue": 2,  # stream-failures, async-failures
    "aws_sqs_queue_policy": 2,
    "aws_cloudwatch_event_bus": 1,  # heatsink-control
    "aws_cloudwatch_event_bus_policy": 1,
    "aws_cognito_user_pool": 1,  # count: unless var.jwt_issuer
    "aws_cognito_user_pool_client": 1,
    "aws_apigatewayv2_authorizer": 1,
    "aws_kms_key": 1,
    "aws_kms_alias": 1,
    "aws_cloudwatch_event_rule": 4,  # count-rebuilder schedule; hotkey-controller alarms, schedule, sampler reports
    "aws_cloudwatch_event_target": 1,  # for_each over the four rules
    "aws_lambda_permission": 2,  # events (for_each) + API
    "aws_apigatewayv2_api": 1,
    "aws_apigatewayv2_integration": 1,
    "aws_apigatewayv2_route": 2,
    "aws_apigatewayv2_stage": 1,
    "aws_cloudwatch_contributor_insight_rule": 1,  # for_each over the rules
    # hot, throttled, function (errors/throttles), kinesis (for_each each); iterator age, stream
    # throttled, stream failures, async failures, corrections, two heartbeats, API 5xx and p99
    "aws_cloudwatch_metric_alarm": 13,
    "aws_sns_topic": 1,
    "aws_sns_topic_policy": 1,
    "aws_cloudwatch_dashboard": 1,
}


def test_same_resource_list_as_the_cdk_app():
    counts = {}
    for rtype, _ in RESOURCES:
        counts[rtype] = counts.get(rtype, 0) + 1
    assert counts == SAME_AS_CDK


def test_four_functions_arm64_by_default():
    text = FILES["functions.tf"].read_text()
    names = re.search(r"function_names\s*=\s*\[([^\]]*)\]", text).group(1)
    assert [n.strip().strip('"') for n in names.split(",")] == [
        "likes-api",
        "likes-aggregator",
        "count-rebuilder",
        "hotkey-controller",
    ]
    fn = RESOURCES[("aws_lambda_function", "function")]
    assert unq(fn["runtime"]) == "provided.al2023"
    assert unq(fn["handler"]) == "bootstrap"
    assert fn["architectures"] == ["${var.architecture}"]
    assert variable_default("architecture") == "arm64"
    assert unq(fn["filename"]) == "${var.lambda_dir}/${each.key}/bootstrap.zip"


AGGREGATOR_SOURCE = {
    "kinesis": ("like_events", "${aws_kinesis_stream.like_events.arn}"),
    "dynamodb-streams": ("liked_stream", "${aws_dynamodb_table.liked.stream_arn}"),
}


@pytest.mark.parametrize("source", [variable_default("like_events_source"), *LIKE_EVENTS_SOURCES])
def test_aggregator_has_exactly_one_event_source_mapping(source):
    """The table's stream and like-events carry the same changes: two mappings would count every like twice."""
    mappings = {
        rname: body
        for (rtype, rname), body in RESOURCES.items()
        if rtype == "aws_lambda_event_source_mapping"
        and unq(body["function_name"]) == '${aws_lambda_function.function["likes-aggregator"].arn}'
    }
    created = [rname for rname, body in mappings.items() if instances(body, source) == 1]
    expected_name, expected_arn = AGGREGATOR_SOURCE[source]
    assert created == [expected_name]
    assert unq(mappings[expected_name]["event_source_arn"]) == expected_arn


def test_default_source_is_kinesis_with_one_mapping():
    default = variable_default("like_events_source")
    assert default == "kinesis"
    created = [
        rname
        for (rtype, rname), body in RESOURCES.items()
        if rtype == "aws_lambda_event_source_mapping" and instances(body, default) == 1
    ]
    assert created == ["like_events"]


def iam_locals():
    for block in PARSED["iam.tf"].get("locals", []):
        if "policies" in block:
            return block
    raise KeyError("locals with policies")


@pytest.mark.parametrize("source", LIKE_EVENTS_SOURCES)
def test_aggregator_reads_only_the_chosen_source(source):
    block = iam_locals()
    statements = []
    for st in block["policies"]['"likes-aggregator"']:
        if isinstance(st, str):
            assert unq(st) == "${local.aggregator_source_statement[var.like_events_source]}"
            st = block["aggregator_source_statement"][f'"{source}"']
        statements.append(st)
    actions = [unq(a) for st in statements for a in st["Action"]]
    kinesis_reads = [a for a in actions if a.startswith("kinesis:")]
    stream_reads = [a for a in actions if a in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams")]
    resources_read = {unq(st["Resource"]) for st in statements if any(unq(a) in kinesis_reads + stream_reads for a in st["Action"])}
    if source == "kinesis":
        assert {"kinesis:GetRecords", "kinesis:GetShardIterator"} <= set(kinesis_reads)
        assert stream_reads == []
        assert resources_read == {"${aws_kinesis_stream.like_events.arn}"}
    else:
        assert {"dynamodb:GetRecords", "dynamodb:GetShardIterator"} <= set(stream_reads)
        assert kinesis_reads == []
        assert resources_read == {"${aws_dynamodb_table.liked.stream_arn}"}


@pytest.mark.parametrize("mapping", ["liked_stream", "like_events"])
def test_aggregator_event_sources(mapping):
    esm = RESOURCES[("aws_lambda_event_source_mapping", mapping)]
    assert unq(esm["function_name"]) == '${aws_lambda_function.function["likes-aggregator"].arn}'
    assert [unq(t) for t in esm["function_response_types"]] == ["ReportBatchItemFailures"]
    assert esm["bisect_batch_on_function_error"] is True
    assert esm["parallelization_factor"] == 1
    assert resolve_esm(esm["batch_size"]) == ESM["batch_size"]
    assert resolve_esm(esm["maximum_batching_window_in_seconds"]) == ESM["window_seconds"]
    assert esm["destination_config"][0]["on_failure"][0]["destination_arn"]
    source = unq(esm["event_source_arn"])
    assert source == {"liked_stream": "${aws_dynamodb_table.liked.stream_arn}", "like_events": "${aws_kinesis_stream.like_events.arn}"}[mapping]


def test_schedules_and_alarm_rule():
    assert unq(RESOURCES[("aws_cloudwatch_event_rule", "count_rebuilder_schedule")]["schedule_expression"]) == "rate(5 minutes)"
    assert RESOURCES[("aws_cloudwatch_event_rule", "hotkey_controller_schedule")]["schedule_expression"]
    pattern = unq(RESOURCES[("aws_cloudwatch_event_rule", "hotkey_controller_alarms")]["event_pattern"])
    # Exact alarm names, never a prefix (`heatsink-` would also match `heatsink-staging-`).
    assert "CloudWatch Alarm State Change" in pattern and "aws.cloudwatch" in pattern
    assert "alarmName = local.hot_key_alarm_names" in pattern and "prefix" not in pattern


def plain_locals():
    """Module locals whose value is a plain string literal, by name."""
    out = {}
    for doc in PARSED.values():
        for block in doc.get("locals", []):
            for name, value in block.items():
                if isinstance(value, str) and value.startswith('"') and "${" not in value:
                    out[name] = unq(value)
    return out


def jsonencoded(expression):
    """The value of a `jsonencode({...})` attribute, keys and strings unquoted, `local.x` literals resolved."""
    text = unq(expression)
    assert text.startswith("${jsonencode(") and text.endswith(")}"), text
    value = hcl2.loads("v = " + text[len("${jsonencode(") : -len(")}")])["v"]
    known = plain_locals()

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
    rule = RESOURCES[("aws_cloudwatch_event_rule", "hotkey_controller_sampler_reports")]
    assert named(rule["name"]) == f"{SCHEMA['prefix']}hotkey-controller-sampler-reports"
    assert unq(rule["event_bus_name"]) == "${aws_cloudwatch_event_bus.control.name}"  # never the default bus
    assert named(RESOURCES[("aws_cloudwatch_event_bus", "control")]["name"]) == f"{SCHEMA['prefix']}control"
    assert jsonencoded(rule["event_pattern"]) == {
        "source": ["heatsink.sampler"],
        "detail-type": ["heatsink hot-key report"],
    }
    # Target and invoke permission both come from local.event_targets.
    targets = next(b["event_targets"] for b in PARSED["functions.tf"]["locals"] if "event_targets" in b)
    assert {k: unq(v) for k, v in targets["hotkey_controller_sampler_reports"].items()} == {
        "rule": "${aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.name}",
        "fn": "hotkey-controller",
        "arn": "${aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.arn}",
        "bus": "${aws_cloudwatch_event_bus.control.name}",
    }
    target = RESOURCES[("aws_cloudwatch_event_target", "function")]
    assert unq(target["for_each"]) == "${local.event_targets}"
    assert unq(target["arn"]) == "${aws_lambda_function.function[each.value.fn].arn}"
    assert unq(target["event_bus_name"]) == "${each.value.bus}"
    permission = RESOURCES[("aws_lambda_permission", "events")]
    assert unq(permission["for_each"]) == "${local.event_targets}"
    assert unq(permission["action"]) == "lambda:InvokeFunction"
    assert unq(permission["principal"]) == "events.amazonaws.com"
    assert unq(permission["source_arn"]) == "${each.value.arn}"


def test_sampler_publisher_role_may_put_on_the_control_bus_for_the_sampler_source_only():
    assert not [t for (t, _) in RESOURCES if t == "aws_iam_policy"]
    role = RESOURCES[("aws_iam_role", "sampler_publisher")]
    assert named(role["name"]) == f"{SCHEMA['prefix']}sampler-publisher"
    policy = RESOURCES[("aws_iam_role_policy", "sampler_publisher")]
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
    outputs = {unq(k): v for block in PARSED["outputs.tf"]["output"] for k, v in block.items()}
    assert unq(outputs["sampler_publisher_role_arn"]["value"]) == "${aws_iam_role.sampler_publisher.arn}"


def test_the_control_bus_denies_put_events_to_every_principal_but_the_publisher_role():
    policy = RESOURCES[("aws_cloudwatch_event_bus_policy", "control")]
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
    # GetItem/Query/PutItem/DeleteItem of counters (touched rows' buckets, watermarks, lease,
    # cursor, fixes); no Scan of either table.
    text = FILES["iam.tf"].read_text()
    block = re.search(r'"count-rebuilder" = \[(.*?)\n    \]', text, re.S).group(1)
    grants = {
        table: sorted(re.findall(r'"(dynamodb:\w+)"', actions))
        for actions, table in re.findall(r"Action = \[([^\]]*)\], Resource = aws_dynamodb_table\.(\w+)\.arn", block)
    }
    assert grants == {"counters": ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"]}


def test_http_api_routes():
    routes = sorted(unq(b["route_key"]) for (t, _), b in RESOURCES.items() if t == "aws_apigatewayv2_route")
    assert routes == ["GET /posts/{post}", "POST /posts/{post}/likes"]


def test_no_wildcard_actions_and_no_star_resource():
    text = FILES["iam.tf"].read_text()
    statements = re.findall(r"\{ Effect = \"Allow\", Action = \[([^\]]*)\], Resource = ([^}]*)\}", text)
    assert len(statements) >= 12
    for actions, resource in statements:
        acts = [a.strip().strip('"') for a in actions.split(",")]
        assert all("*" not in a for a in acts), acts
        assert resource.strip() != '"*"', acts


def test_alarms_on_insight_rule_max_contributor_and_throttle_reasons():
    hot = RESOURCES[("aws_cloudwatch_metric_alarm", "hot_partition")]
    expression = unq(hot["metric_query"][0]["expression"])
    assert "INSIGHT_RULE_METRIC('${each.key}', 'MaxContributorValue')" in expression
    assert unq(hot["threshold"]) == "${var.hot_partition_fraction * each.value.ceiling}"
    text = FILES["alarms.tf"].read_text()
    for metric in ("ReadKeyRangeThroughputThrottleEvents", "WriteKeyRangeThroughputThrottleEvents", "WriteAccountLimitThrottleEvents"):
        assert metric in text


def test_dashboard_widgets():
    text = FILES["dashboard.tf"].read_text()
    for needle in ("MaxContributorValue", "per-partition ceiling", "insightRule", "CounterLagEvents", "IteratorAge", "LeasesHeld", "CounterCorrectionLikes"):
        assert needle in text


def dashboard_locals():
    for block in PARSED["dashboard.tf"].get("locals", []):
        if "stream_widgets" in block:
            return block
    raise KeyError("locals with stream_widgets")


def widget_series(title):
    """The series of the stream widget titled `title`, with `${local.x.y}` references resolved."""
    block = dashboard_locals()
    widget = next(w for w in block["stream_widgets"] if unq(w["properties"]["title"]) == title)
    out = []
    for m in widget["properties"]["metrics"]:
        if isinstance(m, str):
            path = unq(m).removeprefix("${local.").removesuffix("}").split(".")
            m = block
            for key in path:
                m = m[key]
        out.append([unq(v) if isinstance(v, str) else {k: unq(x) for k, x in v.items()} for v in m])
    return out


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
            "${aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.name}",
            {"stat": "Sum", "label": "sampler reports delivered", "yAxis": "right"},
        ],
    ]
    text = FILES["dashboard.tf"].read_text()
    assert "SampledHotKeys" not in text
    # count-rebuilder is graphed for its own corrections only, never for hot keys.
    rebuilder_series = [line for line in text.splitlines() if '"Function", "count-rebuilder"' in line]
    assert [re.search(r'"heatsink", "(\w+)"', line).group(1) for line in rebuilder_series] == [
        "CounterCorrectionLikes",
        "CountersCorrected",
        "CounterRebuildCompleted",
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
    widget = next(w for w in dashboard_locals()["stream_widgets"] if unq(w["properties"]["title"]) == title)
    assert widget["properties"]["period"] == 300


def test_counter_corrections_alarm_fires_on_any_correction():
    alarm = RESOURCES[("aws_cloudwatch_metric_alarm", "counter_corrections")]
    assert named(alarm["alarm_name"]) == f"{SCHEMA['prefix']}counter-corrections"
    assert {k: unq(alarm[k]) for k in ("namespace", "metric_name", "statistic", "comparison_operator", "treat_missing_data")} == {
        "namespace": "heatsink",
        "metric_name": "CounterCorrectionLikes",
        "statistic": "Sum",
        "comparison_operator": "GreaterThanThreshold",
        "treat_missing_data": "notBreaching",
    }
    assert {unq(k): unq(v) for k, v in alarm["dimensions"].items()} == {"Function": "count-rebuilder"}
    assert (alarm["period"], alarm["evaluation_periods"], alarm["threshold"]) == (300, 1, 0)
    assert "datapoints_to_alarm" not in alarm
    assert [unq(a) for a in alarm["alarm_actions"]] == ["${aws_sns_topic.alarms.arn}"]
    assert [unq(a) for a in alarm["ok_actions"]] == ["${aws_sns_topic.alarms.arn}"]
    assert unq(alarm["alarm_description"]).endswith('Runbook: README \\"Alarms\\".')
    # On the dashboard's alarm status widget with the others.
    alarms = unq(dashboard_alarm_widget()["properties"]["alarms"])
    assert "aws_cloudwatch_metric_alarm.counter_corrections.arn" in alarms


def dashboard_alarm_widget():
    for block in PARSED["dashboard.tf"].get("locals", []):
        if "alarm_widget" in block:
            return block["alarm_widget"]
    raise KeyError("locals with alarm_widget")


def test_no_function_reads_or_writes_the_leases_table():
    """Leases are held by stream consumers outside the module, never by a function."""
    for fn, statements in iam_locals()["policies"].items():
        for st in statements:
            assert "aws_dynamodb_table.leases" not in json.dumps(st), (unq(fn), st)

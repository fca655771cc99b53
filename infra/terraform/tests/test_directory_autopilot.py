"""The directory autopilot block (modules/directory-autopilot) and its example (examples/places),
parsed with python-hcl2 (as test_module.py): the same function, schedule, failure handling, alarms
and dashboard series as the CDK block (infra/cdk/lib/blocks/directory-autopilot.ts, checked by
infra/cdk/test/examples.test.ts). Its grants are test_grants.py's."""

import re

import pytest

from hcl import Mod, clean, unq
from test_module import MODULE, REPO

EXAMPLE = Mod(MODULE / "examples" / "places")
BLOCK = EXAMPLE.call("autopilot")


def test_the_example_calls_the_block_over_its_directory_owners_and_spare():
    call = clean(EXAMPLE.calls["autopilot"])
    assert call["source"] == "../../modules/directory-autopilot"
    assert call["prefix"] == "places-"
    assert EXAMPLE.text(call["directory_table_name"]) == "places-slots"
    assert [EXAMPLE.text(t["name"]) for t in call["owner_tables"]] == ["places-a", "places-b", "places-c"]
    assert [EXAMPLE.text(t) for t in call["spare_table_names"]] == ["places-c"]
    assert call["act"] == "${var.act}" and EXAMPLE.var_value("act") is False
    assert sorted(EXAMPLE.calls) == ["alarms", "autopilot"]


@pytest.mark.parametrize("name", ["directory", "a", "b", "c"])
def test_the_examples_tables(name):
    table = clean(EXAMPLE.resources[("aws_dynamodb_table", name)])
    assert table["name"] == f"places-{'slots' if name == 'directory' else name}"
    assert (table["hash_key"], table["range_key"], table["billing_mode"]) == ("pk", "sk", "PAY_PER_REQUEST")
    assert [(a["name"], a["type"]) for a in table["attribute"]] == [("pk", "S"), ("sk", "S")]
    assert table["point_in_time_recovery"] == [{"enabled": True}]
    assert table["deletion_protection_enabled"] is True
    if name == "directory":
        assert "stream_enabled" not in table
    else:
        assert (table["stream_enabled"], table["stream_view_type"]) == (True, "NEW_AND_OLD_IMAGES")
    assert [k for k in EXAMPLE.resources if k[0] == "aws_dynamodb_table"] == [("aws_dynamodb_table", t) for t in ("directory", "a", "b", "c")]


def test_the_function_runs_every_5_minutes_parked_not_retried_one_period_at_a_time():
    call = clean(BLOCK.calls["directory_autopilot"])
    assert call["source"] == "../function"
    assert (call["binary"], BLOCK.text(call["function_name"])) == ("directory-autopilot", "places-directory-autopilot")
    assert (call["timeout"], call["memory"]) == (900, 512)
    assert call["reserved_concurrency"] == "${var.concurrency}" and BLOCK.var_value("concurrency") == 1
    assert BLOCK.var_value("schedule_minutes") == 5
    rule = clean(BLOCK.resources[("aws_cloudwatch_event_rule", "schedule")])
    assert BLOCK.text(rule["name"]) == "places-directory-autopilot-schedule"
    assert rule["schedule_expression"] == '${var.schedule_minutes == 1 ? "rate(1 minute)" : "rate(${var.schedule_minutes} minutes)"}'
    target = clean(BLOCK.resources[("aws_cloudwatch_event_target", "schedule")])
    assert (target["rule"], target["arn"]) == ("${aws_cloudwatch_event_rule.schedule.name}", "${module.directory_autopilot.arn}")
    assert target["retry_policy"] == [{"maximum_retry_attempts": 2, "maximum_event_age_in_seconds": 600}]
    assert BLOCK.logical(target["dead_letter_config"][0]["arn"], "places-") == ["queue/directory-autopilot-failures"]
    invoke = clean(BLOCK.resources[("aws_lambda_function_event_invoke_config", "autopilot")])
    assert (invoke["function_name"], invoke["maximum_retry_attempts"]) == ("${module.directory_autopilot.function_name}", 0)
    assert invoke["maximum_event_age_in_seconds"] == "${min(max(var.schedule_minutes * 60, 60), 21600)}"
    assert BLOCK.logical(invoke["destination_config"][0]["on_failure"][0]["destination"], "places-") == ["queue/directory-autopilot-failures"]
    permission = clean(BLOCK.resources[("aws_lambda_permission", "schedule")])
    assert (permission["principal"], permission["source_arn"]) == ("events.amazonaws.com", "${aws_cloudwatch_event_rule.schedule.arn}")
    # The block's own queue lets the schedule park undeliverable events there.
    queue = clean(BLOCK.calls["own_async_failures"])
    assert BLOCK.text(queue["name"]) == "places-directory-autopilot-failures"
    assert queue["eventbridge_rule_arns"] == ["${aws_cloudwatch_event_rule.schedule.arn}"]


def test_the_environment():
    env = unq(BLOCK.locals["environment"])
    for line in (
        "HEATSINK_PREFIX = var.prefix",
        'RUST_LOG = "info"',
        "HEATSINK_DIRECTORY_TABLE = var.directory_table_name",
        "HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES = tostring(var.cloudwatch_minutes)",
        'HEATSINK_AUTOPILOT_ACT = var.act ? "true" : "false"',
        # The spares only when there are some; the governor's knobs only when given.
        'length(var.spare_table_names) == 0 ? {} : {HEATSINK_AUTOPILOT_SPARE = join(",", var.spare_table_names)}',
        "{for k, v in local.governor : k => tostring(v) if v != null}",
    ):
        assert line in env, line
    assert clean(BLOCK.locals["governor"]) == {
        "HEATSINK_AUTOPILOT_SUSTAIN": "${var.governor.sustain}",
        "HEATSINK_AUTOPILOT_COOLDOWN_MINUTES": "${var.governor.cooldown_minutes}",
        "HEATSINK_AUTOPILOT_PER_HOUR": "${var.governor.per_hour}",
        "HEATSINK_AUTOPILOT_PER_DAY": "${var.governor.per_day}",
        "HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION": "${var.governor.owners_per_operation}",
        "HEATSINK_AUTOPILOT_BAND": "${var.governor.band}",
    }
    assert BLOCK.var_value("cloudwatch_minutes") == 5
    assert BLOCK.var_value("governor") == {}
    assert BLOCK.var_value("spare_table_names") == ["${aws_dynamodb_table.c.name}"]
    assert clean(BLOCK.calls["directory_autopilot"])["environment"] == "${local.environment}"
    # The CDK block sets the same variables.
    ts = (REPO / "infra" / "cdk" / "lib" / "blocks" / "directory-autopilot.ts").read_text()
    names = set(re.findall(r"HEATSINK_[A-Z_]+", env)) | set(clean(BLOCK.locals["governor"]))
    assert names == set(re.findall(r"HEATSINK_[A-Z_]+", ts))


# The heartbeat breaches on missing data over at least 20 minutes (a period may run 15); the gauges
# do not breach on it (the heartbeat covers missing periods).
ALARMS = [
    ("directory-autopilot-failing", "AutopilotPeriodCompleted", "Sum", "LessThanThreshold", "breaching", "${local.heartbeat_periods}"),
    ("directory-autopilot-paused", "AutopilotPaused", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching", 3),
    ("directory-autopilot-out-of-budget", "AutopilotOutOfBudget", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching", 3),
    ("directory-autopilot-unproven", "AutopilotUnproven", "Maximum", "GreaterThanOrEqualToThreshold", "notBreaching", 3),
]


@pytest.mark.parametrize("key,metric,stat,comparison,missing,periods", ALARMS, ids=[a[0] for a in ALARMS])
def test_the_alarms(key, metric, stat, comparison, missing, periods):
    alarm = clean(BLOCK.locals["alarms"])[key]
    assert {k: alarm[k] for k in ("namespace", "metric", "dims", "stat", "period", "comparison", "threshold", "evaluation", "datapoints", "missing")} == {
        "namespace": "heatsink",
        "metric": metric,
        "dims": {"Function": "directory-autopilot"},
        "stat": stat,
        "period": 300,
        "comparison": comparison,
        "threshold": 1,
        "evaluation": periods,
        "datapoints": periods,
        "missing": missing,
    }
    assert unq(BLOCK.locals["heartbeat_periods"]) == "${max(4, ceil(3 * var.schedule_minutes / 5))}"
    resource = clean(BLOCK.resources[("aws_cloudwatch_metric_alarm", "this")])
    assert resource["for_each"] == "${local.alarms}"
    assert resource["alarm_name"] == "${var.prefix}${each.key}"
    assert resource["alarm_actions"] == ["${var.alarm_topic_arn}"] and resource["ok_actions"] == ["${var.alarm_topic_arn}"]
    assert resource["treat_missing_data"] == "${each.value.missing}"
    assert resource["alarm_description"].endswith('Runbook: README \\"Alarms\\".')
    assert EXAMPLE.calls["autopilot"]["alarm_topic_arn"] == "${module.alarms.topic_arn}"
    # The CDK block names the same alarm.
    assert key in (REPO / "infra" / "cdk" / "lib" / "blocks" / "directory-autopilot.ts").read_text()


def test_errors_and_throttles_too():
    alarms = clean(BLOCK.locals["alarms"])
    assert sorted(alarms) == sorted(f"directory-autopilot-{k}" for k in ("errors", "throttles", "failing", "paused", "out-of-budget", "unproven"))
    for kind, metric in (("errors", "Errors"), ("throttles", "Throttles")):
        a = alarms[f"directory-autopilot-{kind}"]
        assert (a["namespace"], a["metric"], a["dims"]) == ("AWS/Lambda", metric, {"FunctionName": "${module.directory_autopilot.function_name}"})


def test_every_alarm_has_a_runbook_row():
    readme = (REPO / "infra" / "README.md").read_text()
    runbook = readme[readme.index("### Alarms and what to do") :]
    for key in clean(BLOCK.locals["alarms"]):
        if key.endswith(("-errors", "-throttles")):
            continue  # the `<function>-errors` / `<function>-throttles` rows
        assert f"| `{key}`" in runbook, key


def test_the_dashboard_series():
    """The CDK block's series (examples.test.ts)."""
    assert clean(BLOCK.locals["series"]) == [
        ["heatsink", "AutopilotPeriodCompleted", "Function", "directory-autopilot", {"stat": "Sum", "label": "periods completed"}],
        ["heatsink", "AutopilotProposals", "Function", "directory-autopilot", {"stat": "Maximum", "label": "proposals"}],
        ["heatsink", "AutopilotOperationsStarted", "Function", "directory-autopilot", {"stat": "Sum", "label": "moves started"}],
        ["heatsink", "AutopilotPaused", "Function", "directory-autopilot", {"stat": "Maximum", "label": "paused", "yAxis": "right"}],
        ["heatsink", "AutopilotOutOfBudget", "Function", "directory-autopilot", {"stat": "Maximum", "label": "waiting on budget", "yAxis": "right"}],
        ["heatsink", "AutopilotUnproven", "Function", "directory-autopilot", {"stat": "Maximum", "label": "unproven in flight", "yAxis": "right"}],
    ]


def test_the_only_star_resource_is_cloudwatch_get_metric_data():
    """cloudwatch:GetMetricData has no resource-level permission; every other statement names its resources."""
    for local in ("statements", "act_statements"):
        for st in clean(BLOCK.locals[local]):
            assert all("*" not in a for a in st["Action"]), st
            assert st["Resource"] != "*" or st["Action"] == ["cloudwatch:GetMetricData"], st

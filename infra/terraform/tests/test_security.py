"""The module's security and resilience settings, parsed with python-hcl2 (as test_module.py)."""

import re

from hcl import clean
from test_module import COUNTER, FILES, GUARD, MODULE, PARSED, REPO, RESOURCES, ROOT, SCHEMA, jsonencoded, named, unq, variable_default

TOPIC = ROOT.call("alarm_topic")


def test_every_route_has_the_jwt_authorizer():
    routes = {unq(b["route_key"]): b for (t, _), b in RESOURCES.items() if t == "aws_apigatewayv2_route"}
    assert sorted(routes) == ["GET /posts/{post}", "POST /posts/{post}/likes"]
    for key, route in routes.items():
        assert unq(route["authorization_type"]) == "JWT", key
        assert unq(route["authorizer_id"]) == "${aws_apigatewayv2_authorizer.likes_jwt.id}", key
    authorizer = RESOURCES[("aws_apigatewayv2_authorizer", "likes_jwt")]
    assert unq(authorizer["authorizer_type"]) == "JWT"
    assert [unq(x) for x in authorizer["identity_sources"]] == ["$request.header.Authorization"]
    jwt = authorizer["jwt_configuration"][0]
    assert (unq(jwt["issuer"]), unq(jwt["audience"])) == ("${local.jwt_issuer}", "${local.jwt_audience}")


def test_a_user_pool_by_default_an_external_issuer_when_given():
    assert variable_default("jwt_issuer") == ""
    locals_ = next(b for b in PARSED["auth.tf"]["locals"] if "jwt_issuer" in b)
    assert unq(locals_["own_pool"]) == '${var.jwt_issuer == ""}'
    assert "var.jwt_issuer" in unq(locals_["jwt_issuer"]) and "aws_cognito_user_pool.users[0].endpoint" in unq(locals_["jwt_issuer"])
    assert "var.jwt_audience" in unq(locals_["jwt_audience"]) and "aws_cognito_user_pool_client.likes[0].id" in unq(locals_["jwt_audience"])
    pool = RESOURCES[("aws_cognito_user_pool", "users")]
    assert unq(pool["count"]) == "${local.own_pool ? 1 : 0}"
    assert unq(pool["mfa_configuration"]) == "ON"
    assert pool["admin_create_user_config"][0]["allow_admin_create_user_only"] is True
    assert pool["password_policy"][0]["minimum_length"] >= 12


def test_the_alarm_topic_key_lets_cloudwatch_encrypt():
    topic = TOPIC.resources[("aws_sns_topic", "this")]
    assert unq(topic["kms_master_key_id"]) == "${aws_kms_key.this.arn}"
    assert ROOT.text(ROOT.calls["alarm_topic"]["topic_name"]) == f"{SCHEMA['prefix']}alarms"
    for p in list(FILES.values()) + list(TOPIC.files.values()):
        assert '"alias/aws/sns"' not in p.read_text()
    key = TOPIC.resources[("aws_kms_key", "this")]
    assert key["enable_key_rotation"] is True
    statements = jsonencoded(key["policy"], TOPIC)["Statement"]
    cloudwatch = [s for s in statements if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}]
    assert len(cloudwatch) == 1
    assert cloudwatch[0]["Effect"] == "Allow"
    assert sorted(cloudwatch[0]["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    # This account's alarms only.
    assert cloudwatch[0]["Condition"] == {"StringEquals": {"aws:SourceAccount": "${data.aws_caller_identity.current.account_id}"}}
    topic_policy = jsonencoded(TOPIC.resources[("aws_sns_topic_policy", "this")]["policy"], TOPIC)["Statement"]
    publish = [s for s in topic_policy if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert publish and publish[0]["Action"] == "sns:Publish"


def alarm_maps():
    """Every alarm entry of the simple (one metric) alarm maps, by its key as written."""
    return {
        "counter": clean(COUNTER.locals["counter_alarms"]),
        "guard": clean(GUARD.locals["controller_alarms"]),
        "photo": clean(ROOT.locals["photo_alarms"]),
        "autopilot": clean(ROOT.locals["autopilot_alarms"]),
    }


def test_errors_throttles_heartbeats_api_and_kinesis_alarms():
    counter_text = COUNTER.files["alarms.tf"].read_text()
    # Errors and Throttles on each of the counter's functions, the controller and likes-api.
    assert re.search(r'"\$\{name\}-errors"\s+= \{ namespace = "AWS/Lambda", metric = "Errors"', counter_text)
    assert re.search(r'"\$\{name\}-throttles"\s+= \{ namespace = "AWS/Lambda", metric = "Throttles"', counter_text)
    assert 'for name, fn in { "likes-aggregator" = module.aggregator, "count-rebuilder" = module.rebuilder }' in counter_text
    guard = alarm_maps()["guard"]
    assert guard["${var.prefix}hotkey-controller-errors"]["metric"] == "Errors"
    assert guard["${var.prefix}hotkey-controller-throttles"]["metric"] == "Throttles"
    photo = alarm_maps()["photo"]
    assert (photo["likes-api-errors"]["metric"], photo["likes-api-throttles"]["metric"]) == ("Errors", "Throttles")
    autopilot = alarm_maps()["autopilot"]
    for kind, metric in (("errors", "Errors"), ("throttles", "Throttles")):
        assert (autopilot[f"autopilot-{kind}"]["metric"], autopilot[f"autopilot-{kind}"]["dims"]) == (metric, {"FunctionName": "${module.autopilot.function_name}"})
    # Heartbeats breach on missing data.
    for entry, fn, metric in (
        (guard["${var.prefix}hotkey-controller-heartbeat"], "hotkey-controller", "HotKeys"),
        (clean(COUNTER.locals["counter_alarms"])["count-rebuilder-heartbeat"], "count-rebuilder", "CounterRebuildCompleted"),
    ):
        assert (entry["metric"], entry["namespace"], entry["missing"]) == (metric, "heatsink", "breaching")
        assert entry["stat"] == "SampleCount" and entry["comparison"] == "LessThanThreshold"
        assert entry["dims"] == {"Function": fn}
    assert photo["likes-api-5xx"]["metric"] == "5xx"
    # Parked batches: how many and how old (replay before the source forgets them).
    counter = clean(COUNTER.locals["counter_alarms"])
    assert counter["stream-failures"]["metric"] == "ApproximateNumberOfMessagesVisible"
    age = counter["stream-failures-age"]
    assert (age["namespace"], age["metric"], age["threshold"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage", "${var.parked_age_alarm_seconds}")
    assert COUNTER.var_value("parked_age_alarm_seconds") == 12 * 3600
    assert unq(ROOT.resources[("aws_cloudwatch_metric_alarm", "api_p99_latency")]["extended_statistic"]) == "p99"
    for metric in ("AgeOfOldestUnreplicatedRecord", "FailedToReplicateRecordCount", "GetRecords.IteratorAgeMilliseconds"):
        assert metric in counter_text
    # Every alarm pages on ALARM and OK.
    for mod, topic in ((ROOT, "${module.alarm_topic.topic_arn}"), (COUNTER, "${var.alarm_topic_arn}"), (GUARD, "${var.alarm_topic_arn}")):
        for (t, name), body in mod.resources.items():
            if t == "aws_cloudwatch_metric_alarm":
                assert body["alarm_actions"] == [topic], name
                assert body["ok_actions"] == [topic], name
    for call in ("counter", "guard"):
        assert ROOT.calls[call]["alarm_topic_arn"] == "${module.alarm_topic.topic_arn}"


def test_every_alarm_name_has_a_runbook_row():
    readme = (REPO / "infra" / "README.md").read_text()
    runbook = readme[readme.index("### Alarms and what to do") :]
    rows = [n for cell in re.findall(r"^\| ([^|]+)\|", runbook, re.M) for n in re.findall(r"`([^`]+)`", cell)]

    def pattern(row):
        parts = re.split(r"(\[-<[a-z-]+>\]|<[a-z-]+>)", row)
        return re.compile("^" + "".join("(-[a-z-]+)?" if p.startswith("[-<") else "[a-z-]+" if p.startswith("<") else re.escape(p) for p in parts) + "$")

    patterns = [pattern(r) for r in rows]
    p = "${var.prefix}"
    names = [p + k for k in alarm_maps()["photo"]]
    names += [p + "likes-api-p99-latency"]
    names += [p + k for k in alarm_maps()["autopilot"]]
    names += [p + "autopilot-throttled-key-range", p + "autopilot-partition-wcu-hot"]
    names += [p + k for k in clean(COUNTER.locals["counter_alarms"])]
    names += [p + f"{fn}-{kind}" for fn in ("likes-aggregator", "count-rebuilder") for kind in ("errors", "throttles")]
    names += list(alarm_maps()["guard"])
    # The kinesis source's alarms carry the table's and stream's names; the guard's, each table's.
    names += [p + "like-events-write-throttled", p + "liked-kinesis-replication-lag", p + "liked-kinesis-replication-failed", p + "like-events-iterator-age"]
    names += [p + "liked-partition-wcu-hot", p + "posts-by-creator-throttled-key-range", p + "liked-throttled-capacity"]
    kinesis = clean(COUNTER.locals["kinesis_alarms"]) if isinstance(COUNTER.locals["kinesis_alarms"], dict) else unq(COUNTER.locals["kinesis_alarms"])
    for suffix in ("-write-throttled", "-kinesis-replication-lag", "-kinesis-replication-failed", "-iterator-age"):
        assert suffix in str(kinesis), suffix
    for n in names:
        assert n.startswith(p), n
        short = n[len(p) :]
        assert any(pat.match(short) for pat in patterns), f"{short} has no row in the runbook (infra/README.md)"


def test_resilience_settings():
    assert variable_default("concurrency") == {
        "likes-api": 50,
        "likes-aggregator": 20,
        "count-rebuilder": 1,
        "hotkey-controller": 1,
        "autopilot": 1,
    }
    calls = ROOT.calls
    assert calls["likes_api"]["reserved_concurrency"] == '${var.concurrency["likes-api"]}'
    assert calls["counter"]["concurrency"] == {"aggregator": '${var.concurrency["likes-aggregator"]}', "rebuilder": '${var.concurrency["count-rebuilder"]}'}
    assert calls["guard"]["concurrency"] == '${var.concurrency["hotkey-controller"]}'
    assert calls["autopilot"]["reserved_concurrency"] == '${var.concurrency["autopilot"]}'
    fn = ROOT.call("likes_api").resources[("aws_lambda_function", "this")]
    assert unq(fn["reserved_concurrent_executions"]) == "${var.reserved_concurrency}"
    for mod, name in ((COUNTER, "rebuilder"), (GUARD, "controller"), (ROOT, "autopilot")):
        invoke = clean(mod.resources[("aws_lambda_function_event_invoke_config", name)])
        assert invoke["maximum_retry_attempts"] == 0
        assert mod.logical(invoke["destination_config"][0]["on_failure"][0]["destination"], SCHEMA["prefix"]) == ["queue/async-failures"]
    for mod, name in ((COUNTER, "schedule"), (GUARD, "controller"), (ROOT, "autopilot")):
        target = clean(mod.resources[("aws_cloudwatch_event_target", name)])
        assert mod.logical(target["dead_letter_config"][0]["arn"], SCHEMA["prefix"]) == ["queue/async-failures"]
    for (t, name), body in RESOURCES.items():
        if t == "aws_dynamodb_table":
            assert body["deletion_protection_enabled"] is True, name


def test_no_name_prefix_in_event_patterns_or_iam():
    files = [FILES["functions.tf"], FILES["main.tf"], FILES["autopilot.tf"], GUARD.files["main.tf"], GUARD.files["control.tf"], COUNTER.files["main.tf"], MODULE / "modules" / "function" / "main.tf"]
    for f in files:
        text = f.read_text()
        assert "prefix = var.prefix" not in text or f.name == "main.tf", f
        # The only IAM wildcard: the creation timestamp of DynamoDB's managed rule names.
        for m in re.findall(r'"[^"\n]*\*[^"\n]*"', text):
            allowed = ('"*"', '"sqs:*"', '"kms:GenerateDataKey*"', '"${aws_apigatewayv2_api.likes.execution_arn}/*/*/posts/*"',
                       # the streams of the function's own log group
                       '"${aws_cloudwatch_log_group.this.arn}:*"')
            assert m in allowed or m.endswith('${t.name}-*"'), (f, m)
    pattern = unq(GUARD.resources[("aws_cloudwatch_event_rule", "alarms")]["event_pattern"])
    assert "prefix" not in pattern


def test_the_api_access_log_keeps_no_source_ip_unless_asked_to():
    stage = RESOURCES[("aws_apigatewayv2_stage", "default")]
    text = unq(stage["access_log_settings"][0]["format"])
    assert text.startswith("${jsonencode(merge(")
    assert "sourceIp" not in text.split("var.access_log_source_ip")[0]
    assert 'var.access_log_source_ip ? {ip = "$context.identity.sourceIp"} : {}' in text
    assert variable_default("access_log_source_ip") is False


def test_capacity_log_is_sampled_and_hashes_the_liked_table():
    text = FILES["main.tf"].read_text()
    # Every function of the app gets the capacity log's settings.
    for call in ("likes_api", "counter", "guard", "autopilot"):
        assert "local.capacity_log" in str(ROOT.calls[call]["environment"]), call
    assert 'HEATSINK_CAPACITY_LOG_SAMPLE       = "100"' in text
    clear = re.search(r'HEATSINK_CAPACITY_LOG_CLEAR_TABLES = join\(",", \[for t in \[([^\]]*)\]', text).group(1)
    assert sorted(t.strip().strip('"') for t in clear.split(",")) == ["autopilot", "counters", "hotkeys", "leases", "posts"]

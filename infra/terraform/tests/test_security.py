"""The module's security and resilience settings, parsed with python-hcl2 (as test_module.py)."""

import re

from test_module import FILES, PARSED, REPO, RESOURCES, SCHEMA, jsonencoded, named, unq, variable_default


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
    topic = RESOURCES[("aws_sns_topic", "alarms")]
    assert unq(topic["kms_master_key_id"]) == "${aws_kms_key.alarms.arn}"
    assert '"alias/aws/sns"' not in FILES["alarms.tf"].read_text()
    key = RESOURCES[("aws_kms_key", "alarms")]
    assert key["enable_key_rotation"] is True
    statements = jsonencoded(key["policy"])["Statement"]
    cloudwatch = [s for s in statements if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}]
    assert len(cloudwatch) == 1
    assert cloudwatch[0]["Effect"] == "Allow"
    assert sorted(cloudwatch[0]["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    topic_policy = jsonencoded(RESOURCES[("aws_sns_topic_policy", "alarms")]["policy"])["Statement"]
    publish = [s for s in topic_policy if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert publish and publish[0]["Action"] == "sns:Publish"


def alarm_locals(name):
    for block in PARSED["alarms.tf"]["locals"]:
        if name in block:
            return block[name]
    raise KeyError(name)


def test_errors_throttles_heartbeats_api_and_kinesis_alarms():
    fn = RESOURCES[("aws_cloudwatch_metric_alarm", "function")]
    assert unq(fn["namespace"]) == "AWS/Lambda" and unq(fn["metric_name"]) == "${each.value.metric}"
    text = FILES["alarms.tf"].read_text()
    assert '"${name}-errors"    = { fn = name, metric = "Errors"' in text
    assert '"${name}-throttles" = { fn = name, metric = "Throttles"' in text
    for name, fn, metric in (
        ("heartbeat_controller", "hotkey-controller", "HotKeys"),
        ("heartbeat_rebuilder", "count-rebuilder", "CounterRebuildCompleted"),
    ):
        hb = RESOURCES[("aws_cloudwatch_metric_alarm", name)]
        assert unq(hb["metric_name"]) == metric and unq(hb["namespace"]) == "heatsink"
        assert unq(hb["treat_missing_data"]) == "breaching"
        assert unq(hb["statistic"]) == "SampleCount" and unq(hb["comparison_operator"]) == "LessThanThreshold"
        assert named(hb["alarm_name"]) == f"{SCHEMA['prefix']}{fn}-heartbeat"
    assert unq(RESOURCES[("aws_cloudwatch_metric_alarm", "api_5xx")]["metric_name"]) == "5xx"
    assert unq(RESOURCES[("aws_cloudwatch_metric_alarm", "api_p99_latency")]["extended_statistic"]) == "p99"
    for metric in ("AgeOfOldestUnreplicatedRecord", "FailedToReplicateRecordCount", "GetRecords.IteratorAgeMilliseconds"):
        assert metric in text
    # Every alarm pages on ALARM and OK.
    for (t, name), body in RESOURCES.items():
        if t == "aws_cloudwatch_metric_alarm":
            assert body["alarm_actions"] == ["${aws_sns_topic.alarms.arn}"], name
            assert body["ok_actions"] == ["${aws_sns_topic.alarms.arn}"], name


def test_every_alarm_name_has_a_runbook_row():
    readme = (REPO / "infra" / "README.md").read_text()
    runbook = readme[readme.index("### Alarms and what to do") :]
    rows = [n for cell in re.findall(r"^\| ([^|]+)\|", runbook, re.M) for n in re.findall(r"`([^`]+)`", cell)]

    def pattern(row):
        parts = re.split(r"(\[-<[a-z-]+>\]|<[a-z-]+>)", row)
        return re.compile("^" + "".join("(-[a-z-]+)?" if p.startswith("[-<") else "[a-z-]+" if p.startswith("<") else re.escape(p) for p in parts) + "$")

    patterns = [pattern(r) for r in rows]
    names = []
    for (t, name), body in RESOURCES.items():
        if t != "aws_cloudwatch_metric_alarm":
            continue
        n = unq(body["alarm_name"])
        if n in ("${each.key}", "${each.key}-hot"):  # hot_partition / throttled: keys already carry the prefix
            names += {"hot_partition": ["${var.prefix}liked-partition-wcu-hot"], "throttled": ["${var.prefix}posts-by-creator-throttled-key-range", "${var.prefix}liked-throttled-quota"]}[name]
        elif n == "${var.prefix}${each.key}":
            keys = {"function": [f"{f}-{k}" for f in ("likes-api", "hotkey-controller") for k in ("errors", "throttles")],
                    "kinesis": ["liked-kinesis-replication-lag", "liked-kinesis-replication-failed", "like-events-iterator-age"]}[name]
            names += ["${var.prefix}" + k for k in keys]
        else:
            names.append(n)
    for n in names:
        assert n.startswith("${var.prefix}"), n
        short = n[len("${var.prefix}") :]
        assert any(p.match(short) for p in patterns), f"{short} has no row in the runbook (infra/README.md)"


def test_resilience_settings():
    fn = RESOURCES[("aws_lambda_function", "function")]
    assert unq(fn["reserved_concurrent_executions"]) == "${var.concurrency[each.key]}"
    assert variable_default("concurrency") == {
        "likes-api": 50,
        "likes-aggregator": 20,
        "count-rebuilder": 1,
        "hotkey-controller": 1,
    } or {unq(k): v for k, v in variable_default("concurrency").items()} == {
        "likes-api": 50,
        "likes-aggregator": 20,
        "count-rebuilder": 1,
        "hotkey-controller": 1,
    }
    invoke = RESOURCES[("aws_lambda_function_event_invoke_config", "async")]
    assert invoke["maximum_retry_attempts"] == 0
    assert sorted(unq(k) for k in invoke["for_each"]) == ["count-rebuilder", "hotkey-controller"] if isinstance(invoke["for_each"], dict) else "count-rebuilder" in invoke["for_each"]
    assert unq(invoke["destination_config"][0]["on_failure"][0]["destination"]) == "${aws_sqs_queue.async_failures.arn}"
    target = RESOURCES[("aws_cloudwatch_event_target", "function")]
    assert unq(target["dead_letter_config"][0]["arn"]) == "${aws_sqs_queue.async_failures.arn}"
    for (t, name), body in RESOURCES.items():
        if t == "aws_dynamodb_table":
            assert body["deletion_protection_enabled"] is True, name


def test_no_name_prefix_in_event_patterns_or_iam():
    for f in ("functions.tf", "iam.tf", "control.tf"):
        text = FILES[f].read_text()
        assert "prefix = var.prefix" not in text, f
        # The only IAM wildcard: the creation timestamp of DynamoDB's managed rule names.
        for m in re.findall(r'"[^"\n]*\*[^"\n]*"', text):
            allowed = ('"*"', '"sqs:*"', '"kms:GenerateDataKey*"', '"${aws_apigatewayv2_api.likes.execution_arn}/*/*/posts/*"',
                       # the streams of the function's own log group
                       '"${aws_cloudwatch_log_group.function[name].arn}:*"')
            assert m in allowed or m.endswith('${t}-*"'), (f, m)


def test_capacity_log_is_sampled_and_hashes_the_liked_table():
    text = FILES["functions.tf"].read_text()
    assert 'HEATSINK_CAPACITY_LOG_SAMPLE       = "100"' in text
    clear = re.search(r'HEATSINK_CAPACITY_LOG_CLEAR_TABLES = join\(",", \[for t in \[([^\]]*)\]', text).group(1)
    assert sorted(t.strip().strip('"') for t in clear.split(",")) == ["counters", "hotkeys", "leases", "posts"]

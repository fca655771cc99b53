locals {
  function_names = ["likes-api", "likes-aggregator", "count-rebuilder", "hotkey-controller"]
  functions = {
    "likes-api"         = { memory = 256, timeout = 10, description = "POST /posts/{post}/likes, GET /posts/{post}" }
    "likes-aggregator"  = { memory = 256, timeout = 60, description = "like events -> pre-aggregated counter flushes" }
    "count-rebuilder"   = { memory = 512, timeout = 300, description = "scheduled recount from durable likes; writes fix" }
    "hotkey-controller" = { memory = 256, timeout = 60, description = "Contributor Insights + alarms -> hot-key directory" }
  }
  stream_failure_retries = 10
  # source and detail-type of the sampler-report events routers publish (heatsink::control::SAMPLER_SOURCE).
  sampler_source      = "heatsink.sampler"
  sampler_detail_type = "heatsink hot-key report"
}

resource "aws_cloudwatch_log_group" "function" {
  for_each          = local.functions
  name              = "/aws/lambda/${var.prefix}${each.key}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

# One role per function, no managed policies; each policy lists explicit actions on named resources.
resource "aws_iam_role" "function" {
  for_each           = local.functions
  name               = "${var.prefix}${each.key}"
  description        = "${var.prefix}${each.key}: least-privilege execution role"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
  tags               = var.tags
}

resource "aws_lambda_function" "function" {
  for_each         = local.functions
  function_name    = "${var.prefix}${each.key}"
  description      = each.value.description
  role             = aws_iam_role.function[each.key].arn
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = [var.architecture]
  filename         = "${var.lambda_dir}/${each.key}/bootstrap.zip"
  source_code_hash = filebase64sha256("${var.lambda_dir}/${each.key}/bootstrap.zip")
  memory_size      = each.value.memory
  timeout          = each.value.timeout
  # A cap (and a reserve) per function: a flood on the API cannot starve the aggregator, and
  # count-rebuilder and hotkey-controller never run concurrently with themselves.
  reserved_concurrent_executions = var.concurrency[each.key]

  logging_config {
    log_format = "Text"
    log_group  = aws_cloudwatch_log_group.function[each.key].name
  }

  environment {
    variables = merge(
      {
        HEATSINK_PREFIX                    = var.prefix
        HEATSINK_CONTRIBUTOR_INSIGHTS_MODE = "ACCESSED_AND_THROTTLED_KEYS"
        RUST_LOG                           = "info"
        # The capacity log: 1 call in 100, partition keys hashed except on tables keyed by
        # non-personal ids (liked is keyed by the user: hashed).
        HEATSINK_CAPACITY_LOG_SAMPLE       = "100"
        HEATSINK_CAPACITY_LOG_CLEAR_TABLES = join(",", [for t in ["counters", "hotkeys", "posts", "leases"] : "${var.prefix}${t}"])
      },
      each.key == "hotkey-controller" ? {
        HEATSINK_CONTROLLER_TABLES = join(",", [for t, kind in var.controller_tables : "${var.prefix}${t}:${kind}"])
      } : {},
      # Closed shards' counter sub-keys are folded; their tombstones are deleted after the
      # like-events source's retention (24 h, Kinesis and DynamoDB Streams alike).
      each.key == "count-rebuilder" ? {
        HEATSINK_COMPACT_GRACE_SECONDS = tostring(aws_kinesis_stream.like_events.retention_period * 3600)
      } : {},
    )
  }

  tags = var.tags
}

# ---- likes-aggregator: ONE source of the liked table's changes (var.like_events_source) ----------
# The table's stream and like-events carry the same changes: consuming both counts every like twice.
resource "aws_sqs_queue" "stream_failures" {
  name                      = "${var.prefix}stream-failures"
  sqs_managed_sse_enabled   = true
  message_retention_seconds = 1209600
  tags                      = var.tags
}

resource "aws_sqs_queue_policy" "stream_failures" {
  queue_url = aws_sqs_queue.stream_failures.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "EnforceTls"
      Effect    = "Deny"
      Principal = "*"
      Action    = "sqs:*"
      Resource  = aws_sqs_queue.stream_failures.arn
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })
}

resource "aws_lambda_event_source_mapping" "liked_stream" {
  count                              = var.like_events_source == "dynamodb-streams" ? 1 : 0
  function_name                      = aws_lambda_function.function["likes-aggregator"].arn
  event_source_arn                   = aws_dynamodb_table.liked.stream_arn
  starting_position                  = "TRIM_HORIZON"
  batch_size                         = local.esm.batch_size
  maximum_batching_window_in_seconds = local.esm.window_seconds
  bisect_batch_on_function_error     = true
  function_response_types            = ["ReportBatchItemFailures"]
  parallelization_factor             = 1
  maximum_retry_attempts             = local.stream_failure_retries
  maximum_record_age_in_seconds      = 21600

  destination_config {
    on_failure {
      destination_arn = aws_sqs_queue.stream_failures.arn
    }
  }
}

resource "aws_lambda_event_source_mapping" "like_events" {
  count                              = var.like_events_source == "kinesis" ? 1 : 0
  function_name                      = aws_lambda_function.function["likes-aggregator"].arn
  event_source_arn                   = aws_kinesis_stream.like_events.arn
  starting_position                  = "TRIM_HORIZON"
  batch_size                         = local.esm.batch_size
  maximum_batching_window_in_seconds = local.esm.window_seconds
  bisect_batch_on_function_error     = true
  function_response_types            = ["ReportBatchItemFailures"]
  parallelization_factor             = 1
  maximum_retry_attempts             = local.stream_failure_retries
  maximum_record_age_in_seconds      = 21600

  destination_config {
    on_failure {
      destination_arn = aws_sqs_queue.stream_failures.arn
    }
  }
}

# ---- count-rebuilder and hotkey-controller: EventBridge ----------------------------------------
# Failed asynchronous invocations and events EventBridge could not deliver: nothing asynchronous is
# dropped silently.
resource "aws_sqs_queue" "async_failures" {
  name                      = "${var.prefix}async-failures"
  sqs_managed_sse_enabled   = true
  message_retention_seconds = 1209600
  tags                      = var.tags
}

resource "aws_sqs_queue_policy" "async_failures" {
  queue_url = aws_sqs_queue.async_failures.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "EnforceTls"
        Effect    = "Deny"
        Principal = "*"
        Action    = "sqs:*"
        Resource  = aws_sqs_queue.async_failures.arn
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      },
      {
        Sid       = "EventBridgeDeadLetters"
        Effect    = "Allow"
        Principal = { Service = "events.amazonaws.com" }
        Action    = "sqs:SendMessage"
        Resource  = aws_sqs_queue.async_failures.arn
        Condition = { ArnEquals = { "aws:SourceArn" = [for k, t in local.event_targets : t.arn] } }
      },
    ]
  })
}

# No async retries (the next tick is the retry; concurrency 1 must not queue duplicates); failures
# to the queue above.
resource "aws_lambda_function_event_invoke_config" "async" {
  for_each                     = { "count-rebuilder" = 300, "hotkey-controller" = 60 }
  function_name                = aws_lambda_function.function[each.key].function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = each.value

  destination_config {
    on_failure {
      destination = aws_sqs_queue.async_failures.arn
    }
  }
}

resource "aws_cloudwatch_event_rule" "count_rebuilder_schedule" {
  name                = "${var.prefix}count-rebuilder-schedule"
  schedule_expression = "rate(5 minutes)"
  tags                = var.tags
}

# State changes of exactly the hot-key alarms (names, not a prefix: `heatsink-` would also match
# `heatsink-staging-`; names, not ARNs: an event pattern holds at most 2,048 characters).
resource "aws_cloudwatch_event_rule" "hotkey_controller_alarms" {
  name        = "${var.prefix}hotkey-controller-alarms"
  description = "heatsink hot-key alarm state changes -> hotkey-controller"
  event_pattern = jsonencode({
    source        = ["aws.cloudwatch"]
    "detail-type" = ["CloudWatch Alarm State Change"]
    detail        = { alarmName = local.hot_key_alarm_names }
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_rule" "hotkey_controller_schedule" {
  name                = "${var.prefix}hotkey-controller-schedule"
  schedule_expression = "rate(1 minute)"
  tags                = var.tags
}

# Routers' client samplers (long-lived services embedding heatsink) publish their hot-key reports to
# the control bus as the sampler publisher role (control.tf); they name keys within seconds.
resource "aws_cloudwatch_event_rule" "hotkey_controller_sampler_reports" {
  name           = "${var.prefix}hotkey-controller-sampler-reports"
  description    = "heatsink sampler reports (${var.prefix}control bus) -> hotkey-controller"
  event_bus_name = aws_cloudwatch_event_bus.control.name
  event_pattern = jsonencode({
    source        = [local.sampler_source]
    "detail-type" = [local.sampler_detail_type]
  })
  tags = var.tags
}

locals {
  event_targets = {
    count_rebuilder_schedule          = { rule = aws_cloudwatch_event_rule.count_rebuilder_schedule.name, fn = "count-rebuilder", arn = aws_cloudwatch_event_rule.count_rebuilder_schedule.arn, bus = "default" }
    hotkey_controller_alarms          = { rule = aws_cloudwatch_event_rule.hotkey_controller_alarms.name, fn = "hotkey-controller", arn = aws_cloudwatch_event_rule.hotkey_controller_alarms.arn, bus = "default" }
    hotkey_controller_schedule        = { rule = aws_cloudwatch_event_rule.hotkey_controller_schedule.name, fn = "hotkey-controller", arn = aws_cloudwatch_event_rule.hotkey_controller_schedule.arn, bus = "default" }
    hotkey_controller_sampler_reports = { rule = aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.name, fn = "hotkey-controller", arn = aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.arn, bus = aws_cloudwatch_event_bus.control.name }
  }
}

resource "aws_cloudwatch_event_target" "function" {
  for_each       = local.event_targets
  rule           = each.value.rule
  event_bus_name = each.value.bus
  arn            = aws_lambda_function.function[each.value.fn].arn

  # Delivery retries within 10 minutes, then the event is parked in async-failures.
  retry_policy {
    maximum_retry_attempts       = 2
    maximum_event_age_in_seconds = 600
  }

  dead_letter_config {
    arn = aws_sqs_queue.async_failures.arn
  }
}

resource "aws_lambda_permission" "events" {
  for_each      = local.event_targets
  statement_id  = "events-${each.key}"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.function[each.value.fn].function_name
  principal     = "events.amazonaws.com"
  source_arn    = each.value.arn
}

# ---- likes-api: HTTP API ----------------------------------------------------------------------
resource "aws_cloudwatch_log_group" "api_access" {
  name              = "/aws/http-api/${var.prefix}likes"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_apigatewayv2_api" "likes" {
  name          = "${var.prefix}likes"
  protocol_type = "HTTP"
  tags          = var.tags
}

resource "aws_apigatewayv2_integration" "likes_api" {
  api_id                 = aws_apigatewayv2_api.likes.id
  integration_type       = "AWS_PROXY"
  integration_uri        = aws_lambda_function.function["likes-api"].arn
  payload_format_version = "2.0"
}

# Every route, the write first, needs a valid JWT (auth.tf); likes-api reads the verified `sub`.
resource "aws_apigatewayv2_route" "post_like" {
  api_id             = aws_apigatewayv2_api.likes.id
  route_key          = "POST /posts/{post}/likes"
  target             = "integrations/${aws_apigatewayv2_integration.likes_api.id}"
  authorization_type = "JWT"
  authorizer_id      = aws_apigatewayv2_authorizer.likes_jwt.id
}

resource "aws_apigatewayv2_route" "get_post" {
  api_id             = aws_apigatewayv2_api.likes.id
  route_key          = "GET /posts/{post}"
  target             = "integrations/${aws_apigatewayv2_integration.likes_api.id}"
  authorization_type = "JWT"
  authorizer_id      = aws_apigatewayv2_authorizer.likes_jwt.id
}

resource "aws_apigatewayv2_stage" "default" {
  api_id      = aws_apigatewayv2_api.likes.id
  name        = "$default"
  auto_deploy = true

  # The stage-wide ceiling bounds the total; behind it likes-api's per-user and per-post admission
  # (429 + Retry-After) and its reserved concurrency.
  default_route_settings {
    throttling_rate_limit  = 20000
    throttling_burst_limit = 5000
  }

  access_log_settings {
    destination_arn = aws_cloudwatch_log_group.api_access.arn
    format = jsonencode({
      requestId = "$context.requestId", ip = "$context.identity.sourceIp", requestTime = "$context.requestTime"
      routeKey  = "$context.routeKey", status = "$context.status", responseLength = "$context.responseLength"
    })
  }

  tags = var.tags
}

resource "aws_lambda_permission" "api" {
  statement_id  = "http-api"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.function["likes-api"].function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.likes.execution_arn}/*/*/posts/*"
}

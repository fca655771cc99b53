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

  logging_config {
    log_format = "Text"
    log_group  = aws_cloudwatch_log_group.function[each.key].name
  }

  environment {
    variables = {
      HEATSINK_PREFIX                    = var.prefix
      HEATSINK_CONTRIBUTOR_INSIGHTS_MODE = "ACCESSED_AND_THROTTLED_KEYS"
      RUST_LOG                           = "info"
    }
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
  batch_size                         = 500
  maximum_batching_window_in_seconds = 1
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
  batch_size                         = 500
  maximum_batching_window_in_seconds = 1
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
resource "aws_cloudwatch_event_rule" "count_rebuilder_schedule" {
  name                = "${var.prefix}count-rebuilder-schedule"
  schedule_expression = "rate(5 minutes)"
  tags                = var.tags
}

resource "aws_cloudwatch_event_rule" "hotkey_controller_alarms" {
  name        = "${var.prefix}hotkey-controller-alarms"
  description = "heatsink alarm state changes -> hotkey-controller"
  event_pattern = jsonencode({
    source        = ["aws.cloudwatch"]
    "detail-type" = ["CloudWatch Alarm State Change"]
    detail        = { alarmName = [{ prefix = var.prefix }] }
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_rule" "hotkey_controller_schedule" {
  name                = "${var.prefix}hotkey-controller-schedule"
  schedule_expression = "rate(1 minute)"
  tags                = var.tags
}

# Routers' client samplers (long-lived services embedding heatsink) publish their hot-key reports to
# the default bus with PutEvents (aws_iam_policy.sampler_publisher); they name keys within seconds.
resource "aws_cloudwatch_event_rule" "hotkey_controller_sampler_reports" {
  name        = "${var.prefix}hotkey-controller-sampler-reports"
  description = "heatsink sampler reports (default bus) -> hotkey-controller"
  event_pattern = jsonencode({
    source        = [local.sampler_source]
    "detail-type" = [local.sampler_detail_type]
  })
  tags = var.tags
}

locals {
  event_targets = {
    count_rebuilder_schedule          = { rule = aws_cloudwatch_event_rule.count_rebuilder_schedule.name, fn = "count-rebuilder", arn = aws_cloudwatch_event_rule.count_rebuilder_schedule.arn }
    hotkey_controller_alarms          = { rule = aws_cloudwatch_event_rule.hotkey_controller_alarms.name, fn = "hotkey-controller", arn = aws_cloudwatch_event_rule.hotkey_controller_alarms.arn }
    hotkey_controller_schedule        = { rule = aws_cloudwatch_event_rule.hotkey_controller_schedule.name, fn = "hotkey-controller", arn = aws_cloudwatch_event_rule.hotkey_controller_schedule.arn }
    hotkey_controller_sampler_reports = { rule = aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.name, fn = "hotkey-controller", arn = aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.arn }
  }
}

resource "aws_cloudwatch_event_target" "function" {
  for_each = local.event_targets
  rule     = each.value.rule
  arn      = aws_lambda_function.function[each.value.fn].arn

  retry_policy {
    maximum_retry_attempts       = 2
    maximum_event_age_in_seconds = 3600
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

resource "aws_apigatewayv2_route" "post_like" {
  api_id    = aws_apigatewayv2_api.likes.id
  route_key = "POST /posts/{post}/likes"
  target    = "integrations/${aws_apigatewayv2_integration.likes_api.id}"
}

resource "aws_apigatewayv2_route" "get_post" {
  api_id    = aws_apigatewayv2_api.likes.id
  route_key = "GET /posts/{post}"
  target    = "integrations/${aws_apigatewayv2_integration.likes_api.id}"
}

resource "aws_apigatewayv2_stage" "default" {
  api_id      = aws_apigatewayv2_api.likes.id
  name        = "$default"
  auto_deploy = true

  # Stage-wide ceiling in front of likes-api's own per-key admission (429 + Retry-After).
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

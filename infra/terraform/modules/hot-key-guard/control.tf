# The control plane: routers put sampler reports on a bus of their own, as one role. The default
# bus is open to any principal with events:PutEvents, so the reports never go there.
resource "aws_iam_role" "sampler_publisher" {
  name        = "${var.prefix}sampler-publisher"
  description = "Routers assume this role to publish heatsink sampler reports to ${var.prefix}control"
  # Account administrators decide which routers' roles may assume it (sts:AssumeRole in their policies).
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { AWS = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root" }
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy" "sampler_publisher" {
  name = "${var.prefix}sampler-publisher"
  role = aws_iam_role.sampler_publisher.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "events:PutEvents"
      Resource  = aws_cloudwatch_event_bus.control.arn
      Condition = { StringEquals = { "events:source" = local.sampler_source } }
    }]
  })
}

resource "aws_cloudwatch_event_bus" "control" {
  name = "${var.prefix}control"
  tags = var.tags
}

resource "aws_cloudwatch_event_bus_policy" "control" {
  event_bus_name = aws_cloudwatch_event_bus.control.name
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "OnlyTheSamplerPublisher"
      Effect    = "Deny"
      Principal = { AWS = "*" }
      Action    = "events:PutEvents"
      Resource  = aws_cloudwatch_event_bus.control.arn
      Condition = { ArnNotEquals = { "aws:PrincipalArn" = aws_iam_role.sampler_publisher.arn } }
    }]
  })
}

resource "aws_cloudwatch_event_rule" "schedule" {
  name                = "${var.prefix}hotkey-controller-schedule"
  schedule_expression = "rate(1 minute)"
  tags                = var.tags
}

# State changes of exactly the hot-key alarms (names, not a prefix: `heatsink-` would also match
# `heatsink-staging-`; names, not ARNs: an event pattern holds at most 2,048 characters).
resource "aws_cloudwatch_event_rule" "alarms" {
  name        = "${var.prefix}hotkey-controller-alarms"
  description = "heatsink hot-key alarm state changes -> hotkey-controller"
  event_pattern = jsonencode({
    source        = ["aws.cloudwatch"]
    "detail-type" = ["CloudWatch Alarm State Change"]
    detail        = { alarmName = local.hot_key_alarm_names }
  })
  tags = var.tags
}

# Routers' client samplers (long-lived services embedding heatsink) publish their hot-key reports
# to the control bus as the sampler publisher role; they name keys within seconds.
resource "aws_cloudwatch_event_rule" "sampler_reports" {
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
  event_rules = {
    schedule        = { name = aws_cloudwatch_event_rule.schedule.name, arn = aws_cloudwatch_event_rule.schedule.arn, bus = "default" }
    alarms          = { name = aws_cloudwatch_event_rule.alarms.name, arn = aws_cloudwatch_event_rule.alarms.arn, bus = "default" }
    sampler_reports = { name = aws_cloudwatch_event_rule.sampler_reports.name, arn = aws_cloudwatch_event_rule.sampler_reports.arn, bus = aws_cloudwatch_event_bus.control.name }
  }
}

resource "aws_cloudwatch_event_target" "controller" {
  for_each       = local.event_rules
  rule           = each.value.name
  event_bus_name = each.value.bus
  arn            = module.controller.arn

  # Delivery retries within 10 minutes, then the event is parked.
  retry_policy {
    maximum_retry_attempts       = 2
    maximum_event_age_in_seconds = 600
  }

  dead_letter_config {
    arn = local.async_failures.arn
  }
}

resource "aws_lambda_permission" "controller" {
  for_each      = local.event_rules
  statement_id  = "events-${each.key}"
  action        = "lambda:InvokeFunction"
  function_name = module.controller.function_name
  principal     = "events.amazonaws.com"
  source_arn    = each.value.arn
}

# The autopilot: like-events' control loop (the CDK app's lib/autopilot.ts). Every minute it samples
# the load of each open shard of <prefix>like-events (the function derives the name from
# HEATSINK_PREFIX) and decides, with hysteresis, cooldowns, an hourly and daily operation budget and a
# kill switch, whether to split a shard or merge two. Its state and the kill switch are one item per
# stream in <prefix>autopilot.
#
# A dry run by default (var.autopilot_act = false): the loop only reports what it would do (logs and
# EMF metrics), and its role cannot reshard: kinesis:SplitShard and kinesis:MergeShards are granted
# only with the act switch on (infra/grants.json's `act` entries). The kill switch is
# `heatsink autopilot pause --stream <prefix>like-events --reason ...`, honoured within one period.
# like-events exists with both like-events sources, so the autopilot does too.

resource "aws_dynamodb_table" "autopilot" {
  name         = "${var.prefix}autopilot"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"
  range_key    = "sk"

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  # A destroy or a replacement must not take the data with it.
  deletion_protection_enabled = true

  tags = var.tags
}

locals {
  # Every grant is a call the autopilot's code makes (infra/grants.json calls.autopilot, recorded by
  # tests/tests/it/grants.rs): its state item, the stream's shard map and per-shard samples; a
  # change to the calls is a change to one of these lines.
  autopilot_statements = [
    { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:UpdateItem"], Resource = aws_dynamodb_table.autopilot.arn },
    { Effect = "Allow", Action = ["kinesis:ListShards", "kinesis:DescribeStreamSummary", "kinesis:GetShardIterator", "kinesis:GetRecords"], Resource = aws_kinesis_stream.like_events.arn },
    # Parks a failed invocation (the Lambda service sends as the role).
    { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = module.async_failures.arn },
    { Effect = "Allow", Action = ["kms:GenerateDataKey", "kms:Decrypt"], Resource = module.async_failures.key_arn },
  ]
  # Only with the act switch on (grants.json entries with "act": true).
  autopilot_act_statements = [
    { Effect = "Allow", Action = ["kinesis:SplitShard", "kinesis:MergeShards"], Resource = aws_kinesis_stream.like_events.arn },
  ]
}

module "autopilot" {
  source               = "./modules/function"
  function_name        = "${var.prefix}autopilot"
  binary               = "autopilot"
  description          = "like-events control loop: per-shard load -> split/merge (${var.autopilot_act ? "acting" : "dry run"})"
  memory               = 256
  timeout              = 60
  reserved_concurrency = var.concurrency["autopilot"]
  lambda_dir           = var.lambda_dir
  architecture         = var.architecture
  log_retention_days   = var.log_retention_days
  tracing              = var.tracing
  tags                 = var.tags
  environment = merge({
    HEATSINK_PREFIX        = var.prefix
    RUST_LOG               = "info"
    HEATSINK_AUTOPILOT_ACT = var.autopilot_act ? "true" : "false"
  }, local.capacity_log)
  statements = concat(local.autopilot_statements, var.autopilot_act ? local.autopilot_act_statements : [])
}

# No async retries (the next period is the retry; concurrency 1 must not queue duplicates); failures
# parked.
resource "aws_lambda_function_event_invoke_config" "autopilot" {
  function_name                = module.autopilot.function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 60

  destination_config {
    on_failure {
      destination = module.async_failures.arn
    }
  }
}

resource "aws_cloudwatch_event_rule" "autopilot" {
  name                = "${var.prefix}autopilot-schedule"
  schedule_expression = "rate(1 minute)"
  tags                = var.tags
}

resource "aws_cloudwatch_event_target" "autopilot" {
  rule = aws_cloudwatch_event_rule.autopilot.name
  arn  = module.autopilot.arn

  # Delivery retries within 10 minutes, then the event is parked.
  retry_policy {
    maximum_retry_attempts       = 2
    maximum_event_age_in_seconds = 600
  }

  dead_letter_config {
    arn = module.async_failures.arn
  }
}

resource "aws_lambda_permission" "autopilot" {
  statement_id  = "events-schedule"
  action        = "lambda:InvokeFunction"
  function_name = module.autopilot.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.autopilot.arn
}

# The autopilot's alarms, each to the alarm topic on ALARM and OK, each with a runbook row
# (infra/README.md, "Alarms and what to do"). The heartbeat (failing) breaches on missing data; the
# gauges do not (the heartbeat covers missing periods).
locals {
  autopilot_alarms = {
    "autopilot-errors"        = { namespace = "AWS/Lambda", metric = "Errors", dims = { FunctionName = module.autopilot.function_name }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "${var.prefix}autopilot failed invocations (Lambda Errors)" }
    "autopilot-throttles"     = { namespace = "AWS/Lambda", metric = "Throttles", dims = { FunctionName = module.autopilot.function_name }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "${var.prefix}autopilot invocations throttled at its reserved concurrency" }
    "autopilot-failing"       = { namespace = "heatsink", metric = "AutopilotPeriodCompleted", dims = { Function = "autopilot" }, stat = "Sum", period = 300, threshold = 1, comparison = "LessThanThreshold", evaluation = 3, datapoints = 3, missing = "breaching", what = "autopilot finished no period (AutopilotPeriodCompleted) in 3 five-minute periods in a row: it stopped running or every period fails" }
    "autopilot-paused"        = { namespace = "heatsink", metric = "AutopilotPaused", dims = { Function = "autopilot" }, stat = "Maximum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "autopilot is paused by its kill switch (AutopilotPaused) for 15 minutes: it reports, never acts" }
    "autopilot-out-of-budget" = { namespace = "heatsink", metric = "AutopilotOutOfBudget", dims = { Function = "autopilot" }, stat = "Maximum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "autopilot proposals waited on the hourly or daily operation budget (AutopilotOutOfBudget) for 15 minutes" }
    "autopilot-unproven"      = { namespace = "heatsink", metric = "AutopilotUnproven", dims = { Function = "autopilot" }, stat = "Maximum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "an autopilot operation is in flight whose end the shard map does not prove while the stream is ACTIVE (AutopilotUnproven), for 15 minutes: an operator must look" }
  }
}

resource "aws_cloudwatch_metric_alarm" "autopilot" {
  for_each            = local.autopilot_alarms
  alarm_name          = "${var.prefix}${each.key}"
  alarm_description   = "${each.value.what}. Runbook: README \"Alarms\"."
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dims
  statistic           = each.value.stat
  period              = each.value.period
  comparison_operator = each.value.comparison
  evaluation_periods  = each.value.evaluation
  datapoints_to_alarm = each.value.datapoints
  threshold           = each.value.threshold
  treat_missing_data  = each.value.missing
  alarm_actions       = [module.alarm_topic.topic_arn]
  ok_actions          = [module.alarm_topic.topic_arn]
  tags                = var.tags
}

# The dashboard's autopilot widget (dashboard.tf): the loop's heartbeat, what it proposed and
# started, and the three states an operator must see; the CDK dashboard's and the local stack's
# series (heatsink_photo_app::dashboard).
locals {
  autopilot_series = [
    ["heatsink", "AutopilotPeriodCompleted", "Function", "autopilot", { stat = "Sum", label = "periods completed" }],
    ["heatsink", "AutopilotProposals", "Function", "autopilot", { stat = "Maximum", label = "proposals" }],
    ["heatsink", "AutopilotOperationsStarted", "Function", "autopilot", { stat = "Sum", label = "splits and merges started" }],
    ["heatsink", "AutopilotPaused", "Function", "autopilot", { stat = "Maximum", label = "paused", yAxis = "right" }],
    ["heatsink", "AutopilotOutOfBudget", "Function", "autopilot", { stat = "Maximum", label = "waiting on budget", yAxis = "right" }],
    ["heatsink", "AutopilotUnproven", "Function", "autopilot", { stat = "Maximum", label = "unproven in flight", yAxis = "right" }],
  ]
  autopilot_widgets = [
    {
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Autopilot (like-events): periods, proposals, operations, holds", region = local.region, view = "timeSeries", period = 60
        metrics = local.autopilot_series
      }
    },
  ]
}

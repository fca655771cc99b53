# The slot directory's autopilot (the CDK block DirectoryAutopilot): a control loop over a team's
# slot directory, a DynamoDB table mapping key-slot ranges to owner tables (heatsink::slots). Every
# schedule_minutes (5 by default) directory-autopilot reads each owner table's consumed write
# capacity from CloudWatch over the last cloudwatch_minutes, places it on slots, and decides, with
# hysteresis, cooldowns, an hourly and daily operation budget and a kill switch, whether to move slot
# ranges from a hotter owner table to a cooler one or to a spare. Its state and the kill switch live
# in the directory table itself.
#
# A dry run by default (var.act = false): the loop only reports what it would do (logs and EMF
# metrics), and its role can neither write the directory's entries nor touch an owner table's items
# or stream: those grants come only with the act switch on (infra/grants.json's `act` entries of
# directory-autopilot). The kill switch is `heatsink autopilot pause --prefix <prefix> --reason ...`,
# honoured within one period; `heatsink autopilot status --prefix <prefix>` shows the state.
#
# Limits: the function's EMF metrics carry Function=directory-autopilot whatever the prefix, so two
# directory autopilots in one account and region share those series (and their alarms see both).
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = { source = "hashicorp/aws", version = ">= 5.100" }
  }
}

locals {
  own_async      = var.async_failures_queue == null
  async_failures = local.own_async ? { arn = one(module.own_async_failures[*].arn), name = one(module.own_async_failures[*].name), key_arn = one(module.own_async_failures[*].key_arn) } : var.async_failures_queue
  # The governor's knobs: set only when given (the function's defaults otherwise).
  governor = {
    HEATSINK_AUTOPILOT_SUSTAIN              = var.governor.sustain
    HEATSINK_AUTOPILOT_COOLDOWN_MINUTES     = var.governor.cooldown_minutes
    HEATSINK_AUTOPILOT_PER_HOUR             = var.governor.per_hour
    HEATSINK_AUTOPILOT_PER_DAY              = var.governor.per_day
    HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION = var.governor.owners_per_operation
    HEATSINK_AUTOPILOT_BAND                 = var.governor.band
  }
  environment = merge(
    {
      HEATSINK_PREFIX                       = var.prefix
      RUST_LOG                              = "info"
      HEATSINK_DIRECTORY_TABLE              = var.directory_table_name
      HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES = tostring(var.cloudwatch_minutes)
      HEATSINK_AUTOPILOT_ACT                = var.act ? "true" : "false"
    },
    length(var.spare_table_names) == 0 ? {} : { HEATSINK_AUTOPILOT_SPARE = join(",", var.spare_table_names) },
    { for k, v in local.governor : k => tostring(v) if v != null },
    var.environment,
  )

  # Every grant is a call the function's code makes (infra/grants.json calls["directory-autopilot"]):
  # a change to the calls is a change to one of these lines. Always (a dry run too): the directory's
  # entries and the loop's state item in it, each owner and spare table's description, and the
  # owners' consumed capacity (cloudwatch:GetMetricData has no resource-level permission: "*").
  statements = [
    { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"], Resource = var.directory_table_arn },
    { Effect = "Allow", Action = ["cloudwatch:GetMetricData"], Resource = "*" },
    # Parks a failed invocation (the Lambda service sends as the role).
    { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = local.async_failures.arn },
    { Effect = "Allow", Action = ["kms:GenerateDataKey", "kms:Decrypt"], Resource = local.async_failures.key_arn },
  ]
  # Only with the act switch on (grants.json entries with "act": true): the mover's calls as the
  # recording test saw them — the move record, lease and mark on the directory; the owner and
  # spare tables' key schema, copy, fence and marker items, purge and diff re-reads; and the
  # changes it catches up on from their streams.
  act_statements = [
    { Effect = "Allow", Action = ["dynamodb:PutItem", "dynamodb:ConditionCheckItem"], Resource = var.directory_table_arn },
    { Effect = "Allow", Action = ["dynamodb:DescribeTable", "dynamodb:Scan", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:GetItem"], Resource = [for t in var.owner_tables : t.arn] },
    { Effect = "Allow", Action = ["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"], Resource = [for t in var.owner_tables : t.stream_arn] },
  ]
}

module "own_async_failures" {
  source                = "../failure-queue"
  count                 = local.own_async ? 1 : 0
  name                  = "${var.prefix}directory-autopilot-failures"
  eventbridge_rule_arns = [aws_cloudwatch_event_rule.schedule.arn]
  tags                  = var.tags
}

module "directory_autopilot" {
  source        = "../function"
  function_name = "${var.prefix}directory-autopilot"
  binary        = "directory-autopilot"
  description   = "${var.directory_table_name} control loop: owner load -> slot moves (${var.act ? "acting" : "dry run"})"
  memory        = 512
  # A period may step a live move until just before its deadline (the code cuts itself first).
  timeout              = 900
  reserved_concurrency = var.concurrency
  lambda_dir           = var.lambda_dir
  architecture         = var.architecture
  environment          = local.environment
  log_retention_days   = var.log_retention_days
  tracing              = var.tracing
  tags                 = var.tags
  statements           = concat(local.statements, var.act ? local.act_statements : [])
}

# No async retries (the next period is the retry; concurrency 1 must not queue duplicates: a tick
# older than one period is parked, not run late); failures parked.
resource "aws_lambda_function_event_invoke_config" "autopilot" {
  function_name                = module.directory_autopilot.function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = min(max(var.schedule_minutes * 60, 60), 21600)

  destination_config {
    on_failure {
      destination = local.async_failures.arn
    }
  }
}

resource "aws_cloudwatch_event_rule" "schedule" {
  name                = "${var.prefix}directory-autopilot-schedule"
  schedule_expression = var.schedule_minutes == 1 ? "rate(1 minute)" : "rate(${var.schedule_minutes} minutes)"
  tags                = var.tags
}

resource "aws_cloudwatch_event_target" "schedule" {
  rule = aws_cloudwatch_event_rule.schedule.name
  arn  = module.directory_autopilot.arn

  # Delivery retries within 10 minutes, then the event is parked.
  retry_policy {
    maximum_retry_attempts       = 2
    maximum_event_age_in_seconds = 600
  }

  dead_letter_config {
    arn = local.async_failures.arn
  }
}

resource "aws_lambda_permission" "schedule" {
  statement_id  = "events-schedule"
  action        = "lambda:InvokeFunction"
  function_name = module.directory_autopilot.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.schedule.arn
}

data "aws_region" "current" {}

# The dashboard widget (output dashboard_widgets): the loop's heartbeat, what it proposed and
# started, and the three states an operator must see; the CDK block's series.
locals {
  series = [
    ["heatsink", "AutopilotPeriodCompleted", "Function", "directory-autopilot", { stat = "Sum", label = "periods completed" }],
    ["heatsink", "AutopilotProposals", "Function", "directory-autopilot", { stat = "Maximum", label = "proposals" }],
    ["heatsink", "AutopilotOperationsStarted", "Function", "directory-autopilot", { stat = "Sum", label = "moves started" }],
    ["heatsink", "AutopilotPaused", "Function", "directory-autopilot", { stat = "Maximum", label = "paused", yAxis = "right" }],
    ["heatsink", "AutopilotOutOfBudget", "Function", "directory-autopilot", { stat = "Maximum", label = "waiting on budget", yAxis = "right" }],
    ["heatsink", "AutopilotUnproven", "Function", "directory-autopilot", { stat = "Maximum", label = "unproven in flight", yAxis = "right" }],
  ]
}

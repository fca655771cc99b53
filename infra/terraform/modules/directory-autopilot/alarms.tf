# The directory autopilot's alarms, each to the alarm topic on ALARM and OK, each with a runbook row
# (infra/README.md, "Alarms and what to do"). The heartbeat (failing) breaches on missing data; the
# gauges do not (the heartbeat covers missing periods). A period may run up to the 15-minute timeout
# (stepping a live move) and the next tick waits for it, so the heartbeat judges silence over at least
# 20 minutes (and at least three schedule intervals).
locals {
  heartbeat_periods = max(4, ceil(3 * var.schedule_minutes / 5))
  alarms = {
    "directory-autopilot-errors"        = { namespace = "AWS/Lambda", metric = "Errors", dims = { FunctionName = module.directory_autopilot.function_name }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "${var.prefix}directory-autopilot failed invocations (Lambda Errors)" }
    "directory-autopilot-throttles"     = { namespace = "AWS/Lambda", metric = "Throttles", dims = { FunctionName = module.directory_autopilot.function_name }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "${var.prefix}directory-autopilot invocations throttled at its reserved concurrency (${var.concurrency})" }
    "directory-autopilot-failing"       = { namespace = "heatsink", metric = "AutopilotPeriodCompleted", dims = { Function = "directory-autopilot" }, stat = "Sum", period = 300, threshold = 1, comparison = "LessThanThreshold", evaluation = local.heartbeat_periods, datapoints = local.heartbeat_periods, missing = "breaching", what = "directory-autopilot (${var.directory_table_name}) finished no period (AutopilotPeriodCompleted) in ${local.heartbeat_periods} five-minute periods in a row: it stopped running or every period fails" }
    "directory-autopilot-paused"        = { namespace = "heatsink", metric = "AutopilotPaused", dims = { Function = "directory-autopilot" }, stat = "Maximum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "directory-autopilot (${var.directory_table_name}) is paused by its kill switch (AutopilotPaused) for 15 minutes: it reports, never acts" }
    "directory-autopilot-out-of-budget" = { namespace = "heatsink", metric = "AutopilotOutOfBudget", dims = { Function = "directory-autopilot" }, stat = "Maximum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "directory-autopilot (${var.directory_table_name}) proposals waited on the hourly or daily operation budget (AutopilotOutOfBudget) for 15 minutes" }
    "directory-autopilot-unproven"      = { namespace = "heatsink", metric = "AutopilotUnproven", dims = { Function = "directory-autopilot" }, stat = "Maximum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "a directory-autopilot (${var.directory_table_name}) move is in flight whose end the directory does not prove (AutopilotUnproven), for 15 minutes: an operator must look" }
  }
}

resource "aws_cloudwatch_metric_alarm" "this" {
  for_each            = local.alarms
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
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

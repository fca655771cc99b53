# heatsink's own insight rules over the capacity log (DynamoDB names its managed rules with a
# creation timestamp, so alarms cannot reference those). Field paths (tracing's JSON layout nests
# an event's fields under `fields`): infra/cdk/lib/observability.ts.
locals {
  capacity_log_groups = length(var.capacity_log_group_names) == 0 ? [] : concat(var.capacity_log_group_names, [module.controller.log_group_name])

  capacity_rules = length(local.capacity_log_groups) == 0 ? {} : merge([
    for k, target in local.targets : {
      for unit in ["wcu", "rcu"] : "${target.table}${target.index == null ? "" : "-${target.index}"}-partition-${unit}" => {
        table   = target.table
        index   = target.index
        unit    = unit
        ceiling = unit == "wcu" ? 1000 : 3000
        body = jsonencode({
          Schema        = { Name = "CloudWatchLogRule", Version = 1 }
          LogGroupNames = local.capacity_log_groups
          LogFormat     = "JSON"
          Contribution = {
            Keys    = ["$.fields.partition_key"]
            ValueOf = unit == "wcu" ? "$.fields.consumed_wcu" : "$.fields.consumed_rcu"
            Filters = [
              { Match = "$.fields.table", In = [target.table] },
              target.index == null ? { Match = "$.fields.index", IsPresent = false } : { Match = "$.fields.index", In = [target.index] },
            ]
          }
          AggregateOn = "Sum"
        })
      }
    }
  ]...)

  throttle_reasons = {
    "key-range" = ["ReadKeyRangeThroughputThrottleEvents", "WriteKeyRangeThroughputThrottleEvents"]
    # Not a hot key: the table (provisioned), the account's per-table quota or the table's
    # on-demand maximum is short. Salting would not help; capacity or a limit would.
    "capacity" = [
      "ReadProvisionedThroughputThrottleEvents", "WriteProvisionedThroughputThrottleEvents",
      "ReadAccountLimitThrottleEvents", "WriteAccountLimitThrottleEvents",
      "ReadMaxOnDemandThroughputThrottleEvents", "WriteMaxOnDemandThroughputThrottleEvents",
    ]
  }
  throttle_alarms = merge([
    for k, target in local.targets : {
      for reason, metrics in local.throttle_reasons : "${target.table}${target.index == null ? "" : "-${target.index}"}-throttled-${reason}" => {
        table   = target.table
        index   = target.index
        reason  = reason
        metrics = metrics
      }
    }
  ]...)

  # The alarms whose state changes wake the controller: hot partitions and key-range throttles, by name.
  hot_key_alarm_names = concat(
    [for name in keys(local.capacity_rules) : "${name}-hot"],
    [for name, a in local.throttle_alarms : name if a.reason == "key-range"],
  )

  controller_alarms = {
    "${var.prefix}hotkey-controller-errors"    = { metric = "Errors", stat = "Sum", period = 300, comparison = "GreaterThanOrEqualToThreshold", missing = "notBreaching", namespace = "AWS/Lambda", dims = { FunctionName = module.controller.function_name }, what = "${var.prefix}hotkey-controller failed invocations (Lambda Errors)" }
    "${var.prefix}hotkey-controller-throttles" = { metric = "Throttles", stat = "Sum", period = 300, comparison = "GreaterThanOrEqualToThreshold", missing = "notBreaching", namespace = "AWS/Lambda", dims = { FunctionName = module.controller.function_name }, what = "${var.prefix}hotkey-controller invocations throttled at its reserved concurrency" }
    # Heartbeat: the controller emits HotKeys after every run (0 included), so no datapoint means
    # it stopped running or stopped succeeding.
    "${var.prefix}hotkey-controller-heartbeat" = { metric = "HotKeys", stat = "SampleCount", period = 300, comparison = "LessThanThreshold", missing = "breaching", namespace = "heatsink", dims = { Function = "hotkey-controller" }, what = "${var.prefix}hotkey-controller runs every minute and emits HotKeys each time; none for 5 minutes" }
  }
}

resource "aws_cloudwatch_contributor_insight_rule" "partition" {
  for_each        = local.capacity_rules
  rule_name       = each.key
  rule_state      = "ENABLED"
  rule_definition = each.value.body
  tags            = var.tags
}

# One hottest-partition-key alarm per insight rule: MaxContributorValue per minute / 60 = per second.
resource "aws_cloudwatch_metric_alarm" "hot_partition" {
  for_each            = local.capacity_rules
  alarm_name          = "${each.key}-hot"
  alarm_description   = "A single partition key is above ${var.hot_partition_fraction * 100}% of the ${each.value.ceiling}/s per-partition ceiling. Runbook: README \"Alarms\"."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = var.hot_partition_fraction * each.value.ceiling
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]

  metric_query {
    id          = "hottest"
    expression  = "INSIGHT_RULE_METRIC('${each.key}', 'MaxContributorValue') / 60"
    label       = "${each.key} per second"
    period      = 60
    return_data = true
  }

  depends_on = [aws_cloudwatch_contributor_insight_rule.partition]
  tags       = var.tags
}

resource "aws_cloudwatch_metric_alarm" "throttled" {
  for_each            = local.throttle_alarms
  alarm_name          = each.key
  alarm_description   = each.value.reason == "key-range" ? "Requests throttled because one partition exceeded its key-range ceiling (hot key). Runbook: README \"Alarms\"." : "Requests throttled for capacity (provisioned throughput, the account's per-table quota or the table's on-demand maximum), not a hot key. Runbook: README \"Alarms\"."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]

  metric_query {
    id          = "total"
    expression  = join(" + ", [for i, m in each.value.metrics : "m${i}"])
    label       = "${each.key} (sum)"
    return_data = true
  }

  dynamic "metric_query" {
    for_each = each.value.metrics
    content {
      id = "m${metric_query.key}"
      metric {
        namespace   = "AWS/DynamoDB"
        metric_name = metric_query.value
        period      = 60
        stat        = "Sum"
        dimensions = each.value.index == null ? { TableName = each.value.table } : {
          TableName                = each.value.table
          GlobalSecondaryIndexName = each.value.index
        }
      }
    }
  }

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "controller" {
  for_each            = local.controller_alarms
  alarm_name          = each.key
  alarm_description   = "${each.value.what}. Runbook: README \"Alarms\"."
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dims
  statistic           = each.value.stat
  period              = each.value.period
  comparison_operator = each.value.comparison
  evaluation_periods  = 1
  threshold           = 1
  treat_missing_data  = each.value.missing
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

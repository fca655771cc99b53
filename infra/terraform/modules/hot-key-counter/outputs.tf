output "counters_table_name" {
  value = aws_dynamodb_table.counters.name
}

output "counters_table_arn" {
  value = aws_dynamodb_table.counters.arn
}

output "function_names" {
  description = "The block's functions by binary: likes-aggregator, count-rebuilder."
  value       = { "likes-aggregator" = module.aggregator.function_name, "count-rebuilder" = module.rebuilder.function_name }
}

output "log_group_names" {
  description = "The functions' log groups (their capacity log feeds modules/hot-key-guard's capacity_log_group_names)."
  value       = [module.aggregator.log_group_name, module.rebuilder.log_group_name]
}

output "role_names" {
  value = { "likes-aggregator" = module.aggregator.role_name, "count-rebuilder" = module.rebuilder.role_name }
}

output "stream_failures_queue_arn" {
  value = module.stream_failures.arn
}

output "event_rule_arns" {
  description = "EventBridge rules whose undeliverable events go to the async failures queue (a shared queue's policy must allow them)."
  value       = [aws_cloudwatch_event_rule.schedule.arn]
}

output "alarm_arns" {
  value = [for a in aws_cloudwatch_metric_alarm.this : a.arn]
}

output "dashboard_widgets" {
  description = "CloudWatch dashboard widgets (objects for a dashboard_body's widgets list)."
  value = [
    {
      type = "metric", width = 8, height = 6
      properties = {
        title = "Counter lag (events applied, not yet flushed) and flush delay", region = data.aws_region.current.name, view = "timeSeries", period = 60
        metrics = [
          ["heatsink", "CounterLagEvents", "Function", "likes-aggregator", { stat = "Maximum" }],
          ["heatsink", "CounterFlushDelaySeconds", "Function", "likes-aggregator", { stat = "Maximum", yAxis = "right" }],
        ]
      }
    },
    {
      type = "metric", width = 8, height = 6
      properties = {
        title = "Stream iterator age (ms)", region = data.aws_region.current.name, view = "timeSeries", period = 60
        metrics = concat(
          [["AWS/Lambda", "IteratorAge", "FunctionName", module.aggregator.function_name, { stat = "Maximum" }]],
          var.source_kind == "kinesis" ? [["AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds", "StreamName", var.source_stream_name, { stat = "Maximum" }]] : [],
        )
        annotations = { horizontal = [{ value = 60000, label = "alarm" }] }
      }
    },
    {
      # count-rebuilder runs every 5 minutes: one datapoint per run.
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Counter corrections (count-rebuilder)", region = data.aws_region.current.name, view = "timeSeries", period = 300
        metrics = local.correction_series
      }
    },
    {
      # Proven progress behind the run's clock (alarm at 900 s), blocked runs, lagging checks.
      type = "metric", width = 8, height = 6
      properties = {
        title       = "Counter repair progress (count-rebuilder)", region = data.aws_region.current.name, view = "timeSeries", period = 300
        metrics     = local.repair_series
        annotations = { horizontal = [{ value = 900, label = "alarm" }] }
      }
    },
    {
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Counter dedupe (likes-aggregator): late, shed, duplicates, foreign", region = data.aws_region.current.name, view = "timeSeries", period = 60
        metrics = local.dedupe_series
      }
    },
  ]
}

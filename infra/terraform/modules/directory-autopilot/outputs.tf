output "function_name" {
  value = module.directory_autopilot.function_name
}

output "role_name" {
  value = module.directory_autopilot.role_name
}

output "log_group_name" {
  description = "The function's log group (its capacity log may feed modules/hot-key-guard's capacity_log_group_names)."
  value       = module.directory_autopilot.log_group_name
}

output "event_rule_arns" {
  description = "EventBridge rules whose undeliverable events go to the async failures queue (a shared queue's policy must allow them)."
  value       = [aws_cloudwatch_event_rule.schedule.arn]
}

output "async_failures_queue_arn" {
  value = local.async_failures.arn
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
        title   = "Directory autopilot (${var.directory_table_name}): periods, proposals, moves, holds", region = data.aws_region.current.name, view = "timeSeries", period = 300
        metrics = local.series
      }
    },
  ]
}

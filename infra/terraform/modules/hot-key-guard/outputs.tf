output "directory_table_name" {
  value = aws_dynamodb_table.hotkeys.name
}

output "directory_table_arn" {
  value = aws_dynamodb_table.hotkeys.arn
}

output "function_name" {
  value = module.controller.function_name
}

output "role_name" {
  value = module.controller.role_name
}

output "log_group_name" {
  value = module.controller.log_group_name
}

output "sampler_publisher_role_arn" {
  description = "Routers assume this role to publish sampler reports to the control bus."
  value       = aws_iam_role.sampler_publisher.arn
}

output "control_bus_name" {
  description = "The event bus routers publish sampler reports to (EventBridgeSink bus)."
  value       = aws_cloudwatch_event_bus.control.name
}

output "sampler_reports_rule_name" {
  value = aws_cloudwatch_event_rule.sampler_reports.name
}

output "event_rule_arns" {
  description = "EventBridge rules whose undeliverable events go to the async failures queue (a shared queue's policy must allow them)."
  value       = [for r in local.event_rules : r.arn]
}

output "hot_key_alarm_names" {
  value = local.hot_key_alarm_names
}

output "alarm_arns" {
  value = concat(
    [for a in aws_cloudwatch_metric_alarm.hot_partition : a.arn],
    [for a in aws_cloudwatch_metric_alarm.throttled : a.arn],
    [for a in aws_cloudwatch_metric_alarm.controller : a.arn],
  )
}

output "dashboard_widgets" {
  description = "CloudWatch dashboard widgets (objects for a dashboard_body's widgets list)."
  value = concat(
    [for name, rule in local.capacity_rules : {
      type = "metric", width = 8, height = 6
      properties = {
        title   = "${name}: hottest partition key per second"
        region  = data.aws_region.current.name
        view    = "timeSeries"
        period  = 60
        metrics = [[{ expression = "INSIGHT_RULE_METRIC('${name}', 'MaxContributorValue') / 60", label = "MaxContributorValue / 60", id = "e1" }]]
        yAxis   = { left = { min = 0 } }
        annotations = { horizontal = [
          { value = rule.ceiling, label = "per-partition ceiling", color = "#d62728" },
          { value = var.hot_partition_fraction * rule.ceiling, label = "alarm", color = "#ff7f0e" },
        ] }
      }
    }],
    [for name, rule in local.capacity_rules : {
      type = "metric", width = 12, height = 6
      properties = {
        title       = "Top contributors: ${name}"
        region      = data.aws_region.current.name
        view        = "timeSeries"
        period      = 60
        insightRule = { maxContributorCount = 10, orderBy = "Sum", ruleName = name }
        legend      = { position = "bottom" }
      }
    }],
    [for k, target in local.targets : {
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Throttles by reason: ${target.table}${target.index == null ? "" : "/${target.index}"}"
        region  = data.aws_region.current.name
        view    = "timeSeries"
        stacked = true
        period  = 60
        metrics = [for m in concat(local.throttle_reasons["key-range"], local.throttle_reasons["capacity"]) : concat(
          ["AWS/DynamoDB", m, "TableName", target.table],
          target.index == null ? [] : ["GlobalSecondaryIndexName", target.index],
          [{ stat = "Sum", label = replace(m, "ThrottleEvents", "") }],
        )]
      }
    }],
    [{
      type = "metric", width = 8, height = 6
      properties = {
        title = "Hot keys: directory vs sampler reports delivered", region = data.aws_region.current.name, view = "timeSeries", period = 60
        metrics = [
          ["heatsink", "HotKeys", "Function", "hotkey-controller", { stat = "Maximum", label = "keys in the directory" }],
          # EventBridge's own count of sampler reports the rule matched.
          ["AWS/Events", "MatchedEvents", "RuleName", aws_cloudwatch_event_rule.sampler_reports.name, { stat = "Sum", label = "sampler reports delivered", yAxis = "right" }],
        ]
      }
    }],
  )
}

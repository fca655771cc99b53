# The photo app's own alarms (the blocks alarm on the counter and the guard), each to the alarm
# topic on ALARM and OK, each with a runbook row (infra/README.md, "Alarms and what to do").
locals {
  photo_alarms = {
    "likes-api-errors"    = { namespace = "AWS/Lambda", metric = "Errors", dims = { FunctionName = module.likes_api.function_name }, stat = "Sum", period = 300, threshold = 1, evaluation = 1, datapoints = 1, what = "${var.prefix}likes-api failed invocations (Lambda Errors)" }
    "likes-api-throttles" = { namespace = "AWS/Lambda", metric = "Throttles", dims = { FunctionName = module.likes_api.function_name }, stat = "Sum", period = 300, threshold = 1, evaluation = 1, datapoints = 1, what = "${var.prefix}likes-api invocations throttled at its reserved concurrency" }
    "async-failures"      = { namespace = "AWS/SQS", metric = "ApproximateNumberOfMessagesVisible", dims = { QueueName = module.async_failures.name }, stat = "Maximum", period = 60, threshold = 1, evaluation = 1, datapoints = 1, what = "A count-rebuilder, hotkey-controller or autopilot invocation failed (no retries), or EventBridge could not deliver to it" }
    "likes-api-5xx"       = { namespace = "AWS/ApiGateway", metric = "5xx", dims = { ApiId = aws_apigatewayv2_api.likes.id }, stat = "Sum", period = 60, threshold = 5, evaluation = 3, datapoints = 2, what = "The likes HTTP API answered 5xx (likes-api failed or timed out)" }
  }
}

resource "aws_cloudwatch_metric_alarm" "photo" {
  for_each            = local.photo_alarms
  alarm_name          = "${var.prefix}${each.key}"
  alarm_description   = "${each.value.what}. Runbook: README \"Alarms\"."
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dims
  statistic           = each.value.stat
  period              = each.value.period
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = each.value.evaluation
  datapoints_to_alarm = each.value.datapoints
  threshold           = each.value.threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = [module.alarm_topic.topic_arn]
  ok_actions          = [module.alarm_topic.topic_arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "api_p99_latency" {
  alarm_name          = "${var.prefix}likes-api-p99-latency"
  alarm_description   = "p99 latency of the likes HTTP API is above 1 s. Runbook: README \"Alarms\"."
  namespace           = "AWS/ApiGateway"
  metric_name         = "Latency"
  dimensions          = { ApiId = aws_apigatewayv2_api.likes.id }
  extended_statistic  = "p99"
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  threshold           = 1000
  treat_missing_data  = "notBreaching"
  alarm_actions       = [module.alarm_topic.topic_arn]
  ok_actions          = [module.alarm_topic.topic_arn]
  tags                = var.tags
}

# A customer-managed key: the AWS-managed alias/aws/sns key's policy cannot be changed to let
# CloudWatch use it, and an alarm action to a topic CloudWatch cannot encrypt for fails.
resource "aws_kms_key" "alarms" {
  description         = "${var.prefix}alarms SNS topic: CloudWatch alarms may encrypt messages to it"
  enable_key_rotation = true
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdministers"
        Effect    = "Allow"
        Principal = { AWS = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchAlarmsPublishEncrypted"
        Effect    = "Allow"
        Principal = { Service = "cloudwatch.amazonaws.com" }
        Action    = ["kms:Decrypt", "kms:GenerateDataKey*"]
        Resource  = "*"
      },
    ]
  })
  tags = var.tags
}

resource "aws_kms_alias" "alarms" {
  name          = "alias/${var.prefix}alarms"
  target_key_id = aws_kms_key.alarms.key_id
}

resource "aws_sns_topic" "alarms" {
  name              = "${var.prefix}alarms"
  kms_master_key_id = aws_kms_key.alarms.arn
  tags              = var.tags
}

resource "aws_sns_topic_policy" "alarms" {
  arn = aws_sns_topic.alarms.arn
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "EnforceTls"
        Effect    = "Deny"
        Principal = "*"
        Action    = "sns:Publish"
        Resource  = aws_sns_topic.alarms.arn
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      },
      {
        Sid       = "CloudWatchAlarms"
        Effect    = "Allow"
        Principal = { Service = "cloudwatch.amazonaws.com" }
        Action    = "sns:Publish"
        Resource  = aws_sns_topic.alarms.arn
        Condition = { StringEquals = { "aws:SourceAccount" = data.aws_caller_identity.current.account_id } }
      },
    ]
  })
}

# One hottest-partition-key alarm per insight rule: MaxContributorValue per minute / 60 = per second.
resource "aws_cloudwatch_metric_alarm" "hot_partition" {
  for_each            = local.insight_rules
  alarm_name          = "${each.key}-hot"
  alarm_description   = "A single partition key is above ${var.hot_partition_fraction * 100}% of the ${each.value.ceiling}/s per-partition ceiling. Runbook: README \"Alarms\"."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = var.hot_partition_fraction * each.value.ceiling
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]

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

locals {
  # The alarms whose state changes wake hotkey-controller (functions.tf): hot partitions and
  # key-range throttles, by name.
  hot_key_alarm_names = concat(
    [for name in keys(local.insight_rules) : "${name}-hot"],
    [for k in keys(local.table_targets) : "${var.prefix}${k}-throttled-key-range"],
  )
  throttle_reasons = {
    "key-range" = ["ReadKeyRangeThroughputThrottleEvents", "WriteKeyRangeThroughputThrottleEvents"]
    "quota" = [
      "ReadAccountLimitThrottleEvents", "WriteAccountLimitThrottleEvents",
      "ReadMaxOnDemandThroughputThrottleEvents", "WriteMaxOnDemandThroughputThrottleEvents",
    ]
  }
  throttle_alarms = merge([
    for k, target in local.table_targets : {
      for reason, metrics in local.throttle_reasons : "${var.prefix}${k}-throttled-${reason}" => {
        table   = target.table
        index   = target.index
        reason  = reason
        metrics = metrics
      }
    }
  ]...)
}

resource "aws_cloudwatch_metric_alarm" "throttled" {
  for_each            = local.throttle_alarms
  alarm_name          = each.key
  alarm_description   = each.value.reason == "key-range" ? "Requests throttled because one partition exceeded its key-range ceiling (hot key). Runbook: README \"Alarms\"." : "Requests throttled by the account's per-table quota or the table's on-demand maximum. Runbook: README \"Alarms\"."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]

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

resource "aws_cloudwatch_metric_alarm" "aggregator_iterator_age" {
  alarm_name          = "${var.prefix}likes-aggregator-iterator-age"
  alarm_description   = "likes-aggregator is more than 60 s behind its event source. Runbook: README \"Alarms\"."
  namespace           = "AWS/Lambda"
  metric_name         = "IteratorAge"
  dimensions          = { FunctionName = aws_lambda_function.function["likes-aggregator"].function_name }
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  threshold           = 60000
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "stream_write_throttled" {
  alarm_name          = "${var.prefix}like-events-write-throttled"
  alarm_description   = "Puts to like-events exceeded a shard's 1,000 records/s or 1 MB/s. Runbook: README \"Alarms\"."
  namespace           = "AWS/Kinesis"
  metric_name         = "PutRecords.ThrottledRecords"
  dimensions          = { StreamName = aws_kinesis_stream.like_events.name }
  statistic           = "Sum"
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "stream_failures" {
  alarm_name          = "${var.prefix}stream-failures"
  alarm_description   = "Stream batches were given up on and parked in the stream-failures queue. Runbook: README \"Alarms\"."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.stream_failures.name }
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 1
  threshold           = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# Any correction means likes were lost or applied twice between `liked` and `counters`, and
# count-rebuilder repaired the counts (one EMF datapoint per run, every 5 minutes).
resource "aws_cloudwatch_metric_alarm" "counter_corrections" {
  alarm_name          = "${var.prefix}counter-corrections"
  alarm_description   = "count-rebuilder corrected counters: likes were lost or applied twice upstream of counters (a lost batch, an aggregator fault); the counts are repaired. Runbook: README \"Alarms\"."
  namespace           = "heatsink"
  metric_name         = "CounterCorrectionLikes"
  dimensions          = { Function = "count-rebuilder" }
  statistic           = "Sum"
  period              = 300
  comparison_operator = "GreaterThanThreshold"
  evaluation_periods  = 1
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "async_failures" {
  alarm_name          = "${var.prefix}async-failures"
  alarm_description   = "A count-rebuilder or hotkey-controller invocation failed (no retries), or EventBridge could not deliver to it. Runbook: README \"Alarms\"."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.async_failures.name }
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 1
  threshold           = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# Every function: unhandled errors and throttles at its reserved concurrency.
locals {
  function_alarms = merge([
    for name in local.function_names : {
      "${name}-errors"    = { fn = name, metric = "Errors", what = "failed invocations (Lambda Errors)" }
      "${name}-throttles" = { fn = name, metric = "Throttles", what = "invocations throttled at its reserved concurrency" }
    }
  ]...)
}

resource "aws_cloudwatch_metric_alarm" "function" {
  for_each            = local.function_alarms
  alarm_name          = "${var.prefix}${each.key}"
  alarm_description   = "${var.prefix}${each.value.fn} ${each.value.what}. Runbook: README \"Alarms\"."
  namespace           = "AWS/Lambda"
  metric_name         = each.value.metric
  dimensions          = { FunctionName = aws_lambda_function.function[each.value.fn].function_name }
  statistic           = "Sum"
  period              = 300
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 1
  threshold           = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# Heartbeats: the scheduled functions emit these after every successful run (0s included), so no
# datapoint means the function stopped running or stopped succeeding.
resource "aws_cloudwatch_metric_alarm" "heartbeat_controller" {
  alarm_name          = "${var.prefix}hotkey-controller-heartbeat"
  alarm_description   = "${var.prefix}hotkey-controller runs every minute and emits HotKeys each time; none for 5 minutes. Runbook: README \"Alarms\"."
  namespace           = "heatsink"
  metric_name         = "HotKeys"
  dimensions          = { Function = "hotkey-controller" }
  statistic           = "SampleCount"
  period              = 300
  comparison_operator = "LessThanThreshold"
  evaluation_periods  = 1
  threshold           = 1
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "heartbeat_rebuilder" {
  alarm_name          = "${var.prefix}count-rebuilder-heartbeat"
  alarm_description   = "${var.prefix}count-rebuilder runs every 5 minutes and emits CounterRebuildCompleted each time; none for 15 minutes. Runbook: README \"Alarms\"."
  namespace           = "heatsink"
  metric_name         = "CounterRebuildCompleted"
  dimensions          = { Function = "count-rebuilder" }
  statistic           = "SampleCount"
  period              = 900
  comparison_operator = "LessThanThreshold"
  evaluation_periods  = 1
  threshold           = 1
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "api_5xx" {
  alarm_name          = "${var.prefix}likes-api-5xx"
  alarm_description   = "The likes HTTP API answered 5xx (likes-api failed or timed out). Runbook: README \"Alarms\"."
  namespace           = "AWS/ApiGateway"
  metric_name         = "5xx"
  dimensions          = { ApiId = aws_apigatewayv2_api.likes.id }
  statistic           = "Sum"
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = 5
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
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
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# The Kinesis streaming destination (kinesis source only): lag, failures, and readers' iterator age.
# DynamoDB publishes the destination's replication metrics in AWS/DynamoDB (Amazon DynamoDB
# Developer Guide, "Configuring shards and monitoring change data capture with Kinesis Data Streams
# in DynamoDB", and the CloudWatch User Guide's recommended DynamoDB alarms):
# AgeOfOldestUnreplicatedRecord (ms since the oldest change not yet copied first appeared in the
# table: the replication lag), FailedToReplicateRecordCount and ThrottledPutRecordCount. The
# recommended-alarms page lists their dimensions as TableName and DelegatedOperation; these alarms
# name TableName only (open: check in a deployed account with
# `aws cloudwatch list-metrics --namespace AWS/DynamoDB --metric-name AgeOfOldestUnreplicatedRecord`
# whether the TableName-only series exists, else add DelegatedOperation's value).
locals {
  kinesis_alarms = var.like_events_source != "kinesis" ? {} : {
    "liked-kinesis-replication-lag"    = { namespace = "AWS/DynamoDB", metric = "AgeOfOldestUnreplicatedRecord", stat = "Maximum", threshold = 60000, dims = { TableName = aws_dynamodb_table.liked.name }, what = "liked changes are more than 60 s old before reaching like-events" }
    "liked-kinesis-replication-failed" = { namespace = "AWS/DynamoDB", metric = "FailedToReplicateRecordCount", stat = "Sum", threshold = 1, dims = { TableName = aws_dynamodb_table.liked.name }, what = "DynamoDB failed to copy liked changes to like-events" }
    "like-events-iterator-age"         = { namespace = "AWS/Kinesis", metric = "GetRecords.IteratorAgeMilliseconds", stat = "Maximum", threshold = 60000, dims = { StreamName = aws_kinesis_stream.like_events.name }, what = "readers of like-events are more than 60 s behind" }
  }
}

resource "aws_cloudwatch_metric_alarm" "kinesis" {
  for_each            = local.kinesis_alarms
  alarm_name          = "${var.prefix}${each.key}"
  alarm_description   = "${each.value.what}. Runbook: README \"Alarms\"."
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dims
  statistic           = each.value.stat
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  evaluation_periods  = each.value.stat == "Sum" ? 1 : 5
  datapoints_to_alarm = each.value.stat == "Sum" ? 1 : 3
  threshold           = each.value.threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

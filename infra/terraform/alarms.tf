resource "aws_sns_topic" "alarms" {
  name              = "${var.prefix}alarms"
  kms_master_key_id = "alias/aws/sns"
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

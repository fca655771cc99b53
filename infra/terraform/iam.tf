# Least privilege per function: explicit actions, named resources. Resource "*" appears only for
# cloudwatch:GetMetricData and cloudwatch:DescribeInsightRules, which have no resource-level
# permissions; DynamoDB's managed insight rules are matched by a pattern because their names end in
# a creation timestamp.
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  insight_rule_arn_prefix = "arn:${data.aws_partition.current.partition}:cloudwatch:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:insight-rule/"

  # likes-aggregator reads only the source it is mapped to (var.like_events_source).
  aggregator_source_statement = {
    "kinesis"          = { Effect = "Allow", Action = ["kinesis:DescribeStream", "kinesis:DescribeStreamSummary", "kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards", "kinesis:SubscribeToShard"], Resource = aws_kinesis_stream.like_events.arn }
    "dynamodb-streams" = { Effect = "Allow", Action = ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"], Resource = aws_dynamodb_table.liked.stream_arn }
  }

  logs_statement = {
    for name in local.function_names : name => {
      Effect   = "Allow"
      Action   = ["logs:CreateLogStream", "logs:PutLogEvents"]
      Resource = "${aws_cloudwatch_log_group.function[name].arn}:*"
    }
  }

  policies = {
    "likes-api" = [
      { Effect = "Allow", Action = ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem"], Resource = aws_dynamodb_table.liked.arn },
      { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem"], Resource = aws_dynamodb_table.counters.arn },
      { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem"], Resource = aws_dynamodb_table.hotkeys.arn },
      { Effect = "Allow", Action = ["dynamodb:GetItem"], Resource = aws_dynamodb_table.posts.arn },
      { Effect = "Allow", Action = ["kinesis:PutRecord", "kinesis:PutRecords", "kinesis:ListShards", "kinesis:DescribeStreamSummary"], Resource = aws_kinesis_stream.like_events.arn },
    ]
    "likes-aggregator" = [
      { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem"], Resource = aws_dynamodb_table.counters.arn },
      { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:BatchGetItem"], Resource = aws_dynamodb_table.hotkeys.arn },
      local.aggregator_source_statement[var.like_events_source],
      { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = aws_sqs_queue.stream_failures.arn },
    ]
    "count-rebuilder" = [
      # exactly what heatsink::likes::rebuild calls: Scan liked; Scan counter keys, Query each counter, Put its fix
      { Effect = "Allow", Action = ["dynamodb:Scan"], Resource = aws_dynamodb_table.liked.arn },
      { Effect = "Allow", Action = ["dynamodb:Scan", "dynamodb:Query", "dynamodb:PutItem"], Resource = aws_dynamodb_table.counters.arn },
    ]
    "hotkey-controller" = [
      { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:Scan"], Resource = aws_dynamodb_table.hotkeys.arn },
      { Effect = "Allow", Action = ["dynamodb:DescribeContributorInsights", "dynamodb:DescribeTable"], Resource = concat([for t in local.tables : t.arn], ["${aws_dynamodb_table.posts.arn}/index/by-creator"]) },
      { Effect = "Allow", Action = ["cloudwatch:GetInsightRuleReport"], Resource = concat([for name in keys(local.insight_rules) : "${local.insight_rule_arn_prefix}${name}"], ["${local.insight_rule_arn_prefix}DynamoDBContributorInsights-*-${var.prefix}*"]) },
      { Effect = "Allow", Action = ["cloudwatch:GetMetricData", "cloudwatch:DescribeInsightRules"], Resource = "*" },
    ]
  }
}

resource "aws_iam_role_policy" "function" {
  for_each = local.functions
  name     = "${var.prefix}${each.key}"
  role     = aws_iam_role.function[each.key].id
  policy = jsonencode({
    Version   = "2012-10-17"
    Statement = concat([local.logs_statement[each.key]], local.policies[each.key])
  })
}

# For routers (services embedding heatsink) to attach to their own roles: PutEvents on the default
# bus, and only events whose source is the sampler's.
resource "aws_iam_policy" "sampler_publisher" {
  name        = "${var.prefix}sampler-publisher"
  description = "Lets a router publish heatsink sampler reports (source ${local.sampler_source}) to the default event bus"
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "events:PutEvents"
      Resource  = "arn:${data.aws_partition.current.partition}:events:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:event-bus/default"
      Condition = { StringEquals = { "events:source" = local.sampler_source } }
    }]
  })
  tags = var.tags
}

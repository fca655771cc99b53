# Least privilege per function: every grant is a call the function's code makes (infra/grants.json,
# recorded by tests/tests/it/grants.rs; tests/test_grants.py fails on a missing or an unused grant)
# or what the Lambda service does with the role (event source reads, failure destinations). No
# Resource "*"; the only wildcards are the creation timestamp at the end of DynamoDB's managed
# Contributor Insights rule names and the streams (`:*`) of the function's own log group.
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  insight_rule_arn_prefix = "arn:${data.aws_partition.current.partition}:cloudwatch:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:insight-rule/"

  # likes-aggregator reads only the source it is mapped to (var.like_events_source).
  aggregator_source_statement = {
    "kinesis"          = { Effect = "Allow", Action = ["kinesis:DescribeStream", "kinesis:DescribeStreamConsumer", "kinesis:DescribeStreamSummary", "kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards", "kinesis:ListStreams", "kinesis:SubscribeToShard"], Resource = aws_kinesis_stream.like_events.arn }
    "dynamodb-streams" = { Effect = "Allow", Action = ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"], Resource = aws_dynamodb_table.liked.stream_arn }
  }

  logs_statement = {
    for name in local.function_names : name => {
      Effect   = "Allow"
      Action   = ["logs:CreateLogStream", "logs:PutLogEvents"]
      Resource = "${aws_cloudwatch_log_group.function[name].arn}:*"
    }
  }

  # The tables hotkey-controller watches, and the managed rules DynamoDB names
  # DynamoDBContributorInsights-{PKC,PKT,SKC,SKT}-<table>-<epoch ms> for them; the controller reads the
  # partition-key rules only (accessed and throttled keys).
  watched_tables = [for t in keys(var.controller_tables) : local.tables[t]]
  managed_rules  = flatten([for t in keys(var.controller_tables) : [for kind in ["PKC", "PKT"] : "${local.insight_rule_arn_prefix}DynamoDBContributorInsights-${kind}-${var.prefix}${t}-*"]])

  async_destination_statement = { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = aws_sqs_queue.async_failures.arn }

  policies = {
    "likes-api" = [
      { Effect = "Allow", Action = ["dynamodb:PutItem"], Resource = aws_dynamodb_table.liked.arn },
      { Effect = "Allow", Action = ["dynamodb:GetItem"], Resource = aws_dynamodb_table.posts.arn },
      { Effect = "Allow", Action = ["dynamodb:Query"], Resource = aws_dynamodb_table.counters.arn },
      { Effect = "Allow", Action = ["dynamodb:Scan"], Resource = aws_dynamodb_table.hotkeys.arn },
    ]
    "likes-aggregator" = [
      { Effect = "Allow", Action = ["dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"], Resource = aws_dynamodb_table.counters.arn },
      local.aggregator_source_statement[var.like_events_source],
      { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = aws_sqs_queue.stream_failures.arn },
    ]
    "count-rebuilder" = [
      # exactly what heatsink::counter::rebuild::Repair calls: Query the touched index, each counter and the
      # watermarks; its lease and cursor (PutItem, GetItem, DeleteItem); bucket fixes; COUNT Queries of liked's by-post;
      # compaction of closed shards' sub-keys (TransactWriteItems of Updates: UpdateItem; the tombstones' reap: DeleteItem)
      { Effect = "Allow", Action = ["dynamodb:Query"], Resource = "${aws_dynamodb_table.liked.arn}/index/by-post" },
      { Effect = "Allow", Action = ["dynamodb:Query"], Resource = "${aws_dynamodb_table.counters.arn}/index/touched" },
      { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"], Resource = aws_dynamodb_table.counters.arn },
      local.async_destination_statement,
    ]
    "hotkey-controller" = [
      { Effect = "Allow", Action = ["dynamodb:Scan", "dynamodb:PutItem", "dynamodb:DeleteItem"], Resource = aws_dynamodb_table.hotkeys.arn },
      # DescribeTable lists a watched table's GSIs, so each index's rules are read too.
      { Effect = "Allow", Action = ["dynamodb:DescribeTable"], Resource = [for t in local.watched_tables : t.arn] },
      { Effect = "Allow", Action = ["dynamodb:DescribeContributorInsights"], Resource = concat(
        [for t in local.watched_tables : t.arn],
        flatten([for t in local.watched_tables : [for g in t.global_secondary_index : "${t.arn}/index/${g.name}"]]),
      ) },
      { Effect = "Allow", Action = ["cloudwatch:GetInsightRuleReport"], Resource = local.managed_rules },
      local.async_destination_statement,
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

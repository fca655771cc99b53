# Hot-key detection driving mitigation, on your tables: the hot-key directory, hotkey-controller
# (every minute, on the guard's hot-key alarms, on sampler reports), Contributor Insights on each
# watched table and GSI, per-partition insight rules over the capacity log, alarms that tell a hot
# key from a table short of capacity, and the control bus only the sampler publisher role may put
# on. The role trusts the account: an administrator grants sts:AssumeRole on it to routers' roles.
terraform {
  required_version = ">= 1.5"
  required_providers {
    # 6.11: aws_dynamodb_contributor_insights.mode.
    aws = { source = "hashicorp/aws", version = ">= 6.11" }
  }
}

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  # source and detail-type of the sampler-report events routers publish (heatsink::detect::SAMPLER_SOURCE).
  sampler_source      = "heatsink.sampler"
  sampler_detail_type = "heatsink hot-key report"
  own_async           = var.async_failures_queue == null
  async_failures      = local.own_async ? { arn = one(module.own_async_failures[*].arn), name = one(module.own_async_failures[*].name), key_arn = one(module.own_async_failures[*].key_arn) } : var.async_failures_queue

  # The directory is watched like the tables.
  tables = merge(
    { hotkeys = { name = aws_dynamodb_table.hotkeys.name, arn = aws_dynamodb_table.hotkeys.arn, indexes = [], hot = null, contributor_insights = var.directory_contributor_insights } },
    var.tables,
  )
  watched = { for k, t in local.tables : k => t if t.hot != null }
  # (table, index) pairs: every table plus every GSI.
  targets = merge(
    { for k, t in local.tables : k => { table = t.name, index = null, mode = t.contributor_insights == null ? (t.hot == null ? "THROTTLED_KEYS" : "ACCESSED_AND_THROTTLED_KEYS") : t.contributor_insights } },
    merge([for k, t in local.tables : { for i in t.indexes : "${k}-${i}" => { table = t.name, index = i, mode = t.contributor_insights == null ? (t.hot == null ? "THROTTLED_KEYS" : "ACCESSED_AND_THROTTLED_KEYS") : t.contributor_insights } }]...),
  )
  insight_rule_arn_prefix = "arn:${data.aws_partition.current.partition}:cloudwatch:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:insight-rule/"
  # DynamoDB names its managed rules DynamoDBContributorInsights-{PKC,PKT,SKC,SKT}-<table>-<epoch ms>;
  # the controller reads the partition-key rules (accessed and throttled keys) of the watched tables.
  watched_arns       = [for k, t in local.watched : t.arn]
  watched_index_arns = flatten([for k, t in local.watched : [for i in t.indexes : "${t.arn}/index/${i}"]])
  managed_rules      = flatten([for k, t in local.watched : [for kind in ["PKC", "PKT"] : "${local.insight_rule_arn_prefix}DynamoDBContributorInsights-${kind}-${t.name}-*"]])
}

locals {
  controller_statements = [
    # Reads the directory, writes epoch-conditional changes.
    { Effect = "Allow", Action = ["dynamodb:Scan", "dynamodb:PutItem", "dynamodb:DeleteItem"], Resource = aws_dynamodb_table.hotkeys.arn },
    # Parks a failed invocation (the Lambda service sends as the role).
    { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = local.async_failures.arn },
    { Effect = "Allow", Action = ["kms:GenerateDataKey", "kms:Decrypt"], Resource = local.async_failures.key_arn },
  ]
  # Only with a watched table (IAM refuses an empty Resource list).
  watch_statements = [
    # DescribeTable lists a watched table's GSIs, so each index's rules are read too.
    { Effect = "Allow", Action = ["dynamodb:DescribeTable"], Resource = local.watched_arns },
    { Effect = "Allow", Action = ["dynamodb:DescribeContributorInsights"], Resource = concat(local.watched_arns, local.watched_index_arns) },
    { Effect = "Allow", Action = ["cloudwatch:GetInsightRuleReport"], Resource = local.managed_rules },
  ]
}

resource "aws_dynamodb_table" "hotkeys" {
  name         = "${var.prefix}hotkeys"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "key"

  attribute {
    name = "key"
    type = "S"
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  # A destroy or a replacement must not take the data with it.
  deletion_protection_enabled = true

  tags = var.tags
}

module "own_async_failures" {
  source                = "../failure-queue"
  count                 = local.own_async ? 1 : 0
  name                  = "${var.prefix}hotkey-controller-failures"
  eventbridge_rule_arns = [for r in local.event_rules : r.arn]
  tags                  = var.tags
}

module "controller" {
  source               = "../function"
  function_name        = "${var.prefix}hotkey-controller"
  binary               = "hotkey-controller"
  description          = "Contributor Insights + alarms -> hot-key directory"
  memory               = 256
  timeout              = 60
  reserved_concurrency = var.concurrency
  lambda_dir           = var.lambda_dir
  architecture         = var.architecture
  log_retention_days   = var.log_retention_days
  tracing              = var.tracing
  tags                 = var.tags
  environment = merge({
    HEATSINK_PREFIX            = var.prefix
    RUST_LOG                   = "info"
    HEATSINK_CONTROLLER_TABLES = join(",", [for k, t in local.watched : "${t.name}:${t.hot}"])
  }, var.environment)
  statements = concat(local.controller_statements, length(local.watched) == 0 ? [] : local.watch_statements)
}

# No async retries (the next trigger is the retry; concurrency 1 must not queue duplicates);
# failures parked.
resource "aws_lambda_function_event_invoke_config" "controller" {
  function_name                = module.controller.function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 60

  destination_config {
    on_failure {
      destination = local.async_failures.arn
    }
  }
}

# DynamoDB Contributor Insights on every watched table and GSI, each in its own mode: accessed and
# throttled keys where the controller acts (it reads the accessed-keys rule to name a hot key before
# it throttles), throttled keys elsewhere (billed for throttled requests only). `mode` needs the
# AWS provider 6.11 or later.
resource "aws_dynamodb_contributor_insights" "this" {
  for_each   = { for k, t in local.targets : k => t if t.mode != "" }
  table_name = each.value.table
  index_name = each.value.index
  mode       = each.value.mode
}

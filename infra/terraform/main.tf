# The photo app, built from the blocks (modules/): likes-api behind the HTTP API (functions.tf), a
# hot-key counter counting likes per post, a hot-key guard on every table and GSI, a lease table
# for stream consumers, the autopilot over like-events (autopilot.tf), one alarm topic.
locals {
  # Every function: the capacity log samples 1 call in 100, partition keys hashed except on tables
  # keyed by non-personal ids (liked is keyed by the user: hashed).
  capacity_log = {
    HEATSINK_CAPACITY_LOG_SAMPLE       = "100"
    HEATSINK_CAPACITY_LOG_CLEAR_TABLES = join(",", [for t in ["counters", "hotkeys", "posts", "leases", "autopilot"] : "${var.prefix}${t}"])
  }
  # The aggregator's one source of liked's changes (var.like_events_source).
  like_events_source_arn = var.like_events_source == "kinesis" ? aws_kinesis_stream.like_events.arn : aws_dynamodb_table.liked.stream_arn
}

module "alarm_topic" {
  source     = "./modules/alarm-topic"
  topic_name = "${var.prefix}alarms"
  tags       = var.tags
}

# Failed asynchronous invocations (EventBridge -> count-rebuilder / hotkey-controller / autopilot)
# and events EventBridge could not deliver: nothing asynchronous is dropped silently.
module "async_failures" {
  source                = "./modules/failure-queue"
  name                  = "${var.prefix}async-failures"
  eventbridge_rule_arns = concat(module.counter.event_rule_arns, module.guard.event_rule_arns, [aws_cloudwatch_event_rule.autopilot.arn])
  tags                  = var.tags
}

module "likes_api" {
  source               = "./modules/function"
  function_name        = "${var.prefix}likes-api"
  binary               = "likes-api"
  description          = "POST /posts/{post}/likes, GET /posts/{post}"
  memory               = 256
  timeout              = 10
  reserved_concurrency = var.concurrency["likes-api"]
  lambda_dir           = var.lambda_dir
  architecture         = var.architecture
  log_retention_days   = var.log_retention_days
  tracing              = var.tracing
  environment          = merge({ HEATSINK_PREFIX = var.prefix, RUST_LOG = "info" }, local.capacity_log)
  tags                 = var.tags
  # Every grant is a call the function's code makes (infra/grants.json, recorded by
  # tests/tests/it/grants.rs): the durable like (conditional put), the post lookup, the count
  # read, the directory Scan.
  statements = [
    { Effect = "Allow", Action = ["dynamodb:PutItem"], Resource = aws_dynamodb_table.liked.arn },
    { Effect = "Allow", Action = ["dynamodb:GetItem"], Resource = aws_dynamodb_table.posts.arn },
    { Effect = "Allow", Action = ["dynamodb:Query"], Resource = module.counter.counters_table_arn },
    { Effect = "Allow", Action = ["dynamodb:Scan"], Resource = module.guard.directory_table_arn },
  ]
}

module "counter" {
  source             = "./modules/hot-key-counter"
  prefix             = var.prefix
  table_name         = aws_dynamodb_table.liked.name
  table_arn          = aws_dynamodb_table.liked.arn
  count_by           = "post"
  counter            = "likes"
  time_attribute     = "liked_at"
  source_kind        = var.like_events_source
  source_arn         = local.like_events_source_arn
  source_stream_name = aws_kinesis_stream.like_events.name
  batch_size         = local.esm.batch_size
  window_seconds     = local.esm.window_seconds
  # Closed shards' tombstones are deleted after the like-events source's retention (24 h, Kinesis
  # and DynamoDB Streams alike), when no record is left to replay.
  compact_grace_seconds = aws_kinesis_stream.like_events.retention_period * 3600
  concurrency           = { aggregator = var.concurrency["likes-aggregator"], rebuilder = var.concurrency["count-rebuilder"] }
  alarm_topic_arn       = module.alarm_topic.topic_arn
  async_failures_queue  = { arn = module.async_failures.arn, name = module.async_failures.name, key_arn = module.async_failures.key_arn }
  lambda_dir            = var.lambda_dir
  architecture          = var.architecture
  log_retention_days    = var.log_retention_days
  tracing               = var.tracing
  environment           = local.capacity_log
  tags                  = var.tags
}

module "leases" {
  source     = "./modules/stream-leases"
  table_name = "${var.prefix}leases"
  tags       = var.tags
}

module "guard" {
  source = "./modules/hot-key-guard"
  prefix = var.prefix
  tables = {
    liked     = { name = aws_dynamodb_table.liked.name, arn = aws_dynamodb_table.liked.arn, indexes = ["by-post"], hot = lookup(var.controller_tables, "liked", null), contributor_insights = var.contributor_insights_mode }
    counters  = { name = module.counter.counters_table_name, arn = module.counter.counters_table_arn, indexes = ["touched"], hot = lookup(var.controller_tables, "counters", null), contributor_insights = var.contributor_insights_mode }
    leases    = { name = module.leases.table_name, arn = module.leases.table_arn, hot = lookup(var.controller_tables, "leases", null), contributor_insights = var.contributor_insights_mode }
    posts     = { name = aws_dynamodb_table.posts.name, arn = aws_dynamodb_table.posts.arn, indexes = ["by-creator"], hot = lookup(var.controller_tables, "posts", null), contributor_insights = var.contributor_insights_mode }
    autopilot = { name = aws_dynamodb_table.autopilot.name, arn = aws_dynamodb_table.autopilot.arn, hot = lookup(var.controller_tables, "autopilot", null), contributor_insights = var.contributor_insights_mode }
  }
  directory_contributor_insights = coalesce(var.contributor_insights_mode, "THROTTLED_KEYS")
  capacity_log_group_names       = concat([module.likes_api.log_group_name, module.autopilot.log_group_name], module.counter.log_group_names)
  hot_partition_fraction         = var.hot_partition_fraction
  alarm_topic_arn                = module.alarm_topic.topic_arn
  async_failures_queue           = { arn = module.async_failures.arn, name = module.async_failures.name, key_arn = module.async_failures.key_arn }
  concurrency                    = var.concurrency["hotkey-controller"]
  lambda_dir                     = var.lambda_dir
  architecture                   = var.architecture
  log_retention_days             = var.log_retention_days
  tracing                        = var.tracing
  environment                    = local.capacity_log
  tags                           = var.tags
}

# Pre-aggregated counters over one of your tables, exact on every stream shape: the counters table,
# likes-aggregator on the table's one change source (partial batch failures, bisect on error, failed
# batches' pointers parked), count-rebuilder every 5 minutes (repairs a bucket only once the
# aggregator's watermarks prove every change was processed), their alarms and dashboard widgets.
# Every grant is a call the function's code makes (infra/grants.json).
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = { source = "hashicorp/aws", version = ">= 5.100" }
  }
}

locals {
  counter        = coalesce(var.counter, var.count_by)
  own_async      = var.async_failures_queue == null
  async_failures = local.own_async ? { arn = one(module.own_async_failures[*].arn), name = one(module.own_async_failures[*].name), key_arn = one(module.own_async_failures[*].key_arn) } : var.async_failures_queue
  counting = {
    HEATSINK_PREFIX               = var.prefix
    HEATSINK_COUNTER              = local.counter
    HEATSINK_COUNT_BY             = var.count_by
    HEATSINK_EVENTS_TABLE         = var.table_name
    HEATSINK_EVENT_TIME_ATTRIBUTE = var.time_attribute
    HEATSINK_COUNTERS_TABLE       = aws_dynamodb_table.counters.name
    # The stream the aggregator is mapped to: both functions list its shards (the lineage). The
    # rebuilder makes every listed shard prove progress before a bucket is judged; the aggregator
    # retires a parent once every child has a watermark.
    HEATSINK_SOURCE_ARN = var.source_arn
    RUST_LOG            = "info"
  }
  # The aggregator reads only the source it is mapped to.
  source_statement = {
    "kinesis"          = { Effect = "Allow", Action = ["kinesis:DescribeStream", "kinesis:DescribeStreamConsumer", "kinesis:DescribeStreamSummary", "kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards", "kinesis:ListStreams", "kinesis:SubscribeToShard"], Resource = var.source_arn }
    "dynamodb-streams" = { Effect = "Allow", Action = ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"], Resource = var.source_arn }
  }
  # The rebuilder's lineage read (heatsink::counter::lineage::for_stream_arn): ListShards of the
  # Kinesis stream, or DescribeStream of the table's stream.
  lineage_statement = {
    "kinesis"          = { Effect = "Allow", Action = ["kinesis:ListShards"], Resource = var.source_arn }
    "dynamodb-streams" = { Effect = "Allow", Action = ["dynamodb:DescribeStream"], Resource = var.source_arn }
  }
  # The redrive of parked batches (heatsink::counter::redrive::Redrive::drain): each parked range
  # read back from the stream.
  redrive_statement = {
    "kinesis"          = { Effect = "Allow", Action = ["kinesis:GetShardIterator", "kinesis:GetRecords"], Resource = var.source_arn }
    "dynamodb-streams" = { Effect = "Allow", Action = ["dynamodb:GetShardIterator", "dynamodb:GetRecords"], Resource = var.source_arn }
  }
}

resource "aws_dynamodb_table" "counters" {
  name         = "${var.prefix}counters"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"
  range_key    = "sk"

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  attribute {
    name = "touched"
    type = "S"
  }

  # Writer sub-keys by their newest time bucket, write-sharded: what changed since a repair.
  global_secondary_index {
    name            = "touched"
    hash_key        = "touched"
    range_key       = "pk"
    projection_type = "ALL"
  }

  point_in_time_recovery {
    enabled = true
  }

  # A destroy or a replacement must not take the data with it.
  deletion_protection_enabled = true

  tags = var.tags
}

module "stream_failures" {
  source = "../failure-queue"
  name   = "${var.prefix}stream-failures"
  tags   = var.tags
}

module "own_async_failures" {
  source                = "../failure-queue"
  count                 = local.own_async ? 1 : 0
  name                  = "${var.prefix}count-rebuilder-failures"
  eventbridge_rule_arns = [aws_cloudwatch_event_rule.schedule.arn]
  tags                  = var.tags
}

module "aggregator" {
  source               = "../function"
  function_name        = "${var.prefix}likes-aggregator"
  binary               = "likes-aggregator"
  description          = "changes -> pre-aggregated counter flushes"
  memory               = 256
  timeout              = 60
  reserved_concurrency = var.concurrency.aggregator
  lambda_dir           = var.lambda_dir
  architecture         = var.architecture
  environment          = merge(local.counting, var.environment)
  log_retention_days   = var.log_retention_days
  tracing              = var.tracing
  tags                 = var.tags
  statements = [
    # Reads the counters it flushes (BatchGetItem), conditional absolute flushes (PutItem), each
    # writer's flushed watermark (UpdateItem).
    { Effect = "Allow", Action = ["dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"], Resource = aws_dynamodb_table.counters.arn },
    local.source_statement[var.source_kind],
    # Parks a failed batch's pointer (the Lambda service sends as the role).
    { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = module.stream_failures.arn },
    { Effect = "Allow", Action = ["kms:GenerateDataKey", "kms:Decrypt"], Resource = module.stream_failures.key_arn },
  ]
}

module "rebuilder" {
  source               = "../function"
  function_name        = "${var.prefix}count-rebuilder"
  binary               = "count-rebuilder"
  description          = "scheduled repair of counters from the durable events; writes fix"
  memory               = 512
  timeout              = 300
  reserved_concurrency = var.concurrency.rebuilder
  lambda_dir           = var.lambda_dir
  architecture         = var.architecture
  environment          = merge(local.counting, { HEATSINK_COMPACT_GRACE_SECONDS = tostring(var.compact_grace_seconds), HEATSINK_STREAM_FAILURES_URL = module.stream_failures.url }, var.environment)
  log_retention_days   = var.log_retention_days
  tracing              = var.tracing
  tags                 = var.tags
  statements = [
    # Exactly what heatsink::counter::rebuild::Repair calls: Query the touched index, each counter
    # and the watermarks; its lease and cursor (PutItem, GetItem, DeleteItem); bucket fixes; COUNT
    # Queries of the table's by-<count_by>; compaction of closed shards' sub-keys (UpdateItem; the
    # tombstones' reap: DeleteItem); the sweep of quiet counters (Scan pages from its cursor).
    { Effect = "Allow", Action = ["dynamodb:Query"], Resource = "${var.table_arn}/index/by-${var.count_by}" },
    { Effect = "Allow", Action = ["dynamodb:Query"], Resource = "${aws_dynamodb_table.counters.arn}/index/touched" },
    { Effect = "Allow", Action = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Scan"], Resource = aws_dynamodb_table.counters.arn },
    local.lineage_statement[var.source_kind],
    # The redrive before each repair (HEATSINK_STREAM_FAILURES_URL): stream-failures' messages
    # (received, deleted once their checks are saved; KMS decrypts them for the role) and each
    # parked range read back from the stream.
    { Effect = "Allow", Action = ["sqs:ReceiveMessage", "sqs:DeleteMessage"], Resource = module.stream_failures.arn },
    { Effect = "Allow", Action = ["kms:Decrypt"], Resource = module.stream_failures.key_arn },
    local.redrive_statement[var.source_kind],
    # Parks a failed invocation (the Lambda service sends as the role).
    { Effect = "Allow", Action = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], Resource = local.async_failures.arn },
    { Effect = "Allow", Action = ["kms:GenerateDataKey", "kms:Decrypt"], Resource = local.async_failures.key_arn },
  ]
}

# Exactly one source of the table's changes.
resource "aws_lambda_event_source_mapping" "aggregator" {
  function_name                      = module.aggregator.arn
  event_source_arn                   = var.source_arn
  starting_position                  = "TRIM_HORIZON"
  batch_size                         = var.batch_size
  maximum_batching_window_in_seconds = var.window_seconds
  bisect_batch_on_function_error     = true
  function_response_types            = ["ReportBatchItemFailures"]
  parallelization_factor             = 1
  maximum_retry_attempts             = var.retry_attempts
  maximum_record_age_in_seconds      = var.max_record_age_seconds

  destination_config {
    on_failure {
      destination_arn = module.stream_failures.arn
    }
  }

  # EventCount metrics (AWS/Lambda by EventSourceMappingUUID): dropped and parked events alarm.
  metrics_config {
    metrics = ["EventCount"]
  }
}

# Scheduled: no async retries (the next tick is the retry; concurrency 1 must not queue
# duplicates); failures parked.
resource "aws_lambda_function_event_invoke_config" "rebuilder" {
  function_name                = module.rebuilder.function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 300

  destination_config {
    on_failure {
      destination = local.async_failures.arn
    }
  }
}

resource "aws_cloudwatch_event_rule" "schedule" {
  name                = "${var.prefix}count-rebuilder-schedule"
  schedule_expression = "rate(5 minutes)"
  tags                = var.tags
}

resource "aws_cloudwatch_event_target" "schedule" {
  rule = aws_cloudwatch_event_rule.schedule.name
  arn  = module.rebuilder.arn

  # Delivery retries within 10 minutes, then the event is parked.
  retry_policy {
    maximum_retry_attempts       = 2
    maximum_event_age_in_seconds = 600
  }

  dead_letter_config {
    arn = local.async_failures.arn
  }
}

resource "aws_lambda_permission" "schedule" {
  statement_id  = "events-schedule"
  action        = "lambda:InvokeFunction"
  function_name = module.rebuilder.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.schedule.arn
}

data "aws_region" "current" {}

locals {
  correction_series = [
    ["heatsink", "CounterCorrectionLikes", "Function", "count-rebuilder", { stat = "Sum", label = "likes corrected" }],
    ["heatsink", "CountersCorrected", "Function", "count-rebuilder", { stat = "Sum", label = "counters corrected" }],
    ["heatsink", "CountersUnsettled", "Function", "count-rebuilder", { stat = "Maximum", label = "counters unsettled", yAxis = "right" }],
    ["heatsink", "CounterRebuildCompleted", "Function", "count-rebuilder", { stat = "Sum", label = "runs completed", yAxis = "right" }],
  ]
  repair_series = [
    ["heatsink", "CounterRepairLag", "Function", "count-rebuilder", { stat = "Maximum", label = "proven progress behind (s)" }],
    ["heatsink", "CounterRepairBlocked", "Function", "count-rebuilder", { stat = "Maximum", label = "run blocked", yAxis = "right" }],
    ["heatsink", "CounterRebuildLagging", "Function", "count-rebuilder", { stat = "Maximum", label = "checks lagging", yAxis = "right" }],
  ]
  dedupe_series = [
    ["heatsink", "CounterLateChanges", "Function", "likes-aggregator", { stat = "Sum", label = "late, counted unchecked" }],
    ["heatsink", "CounterDedupeShed", "Function", "likes-aggregator", { stat = "Sum", label = "identities shed" }],
    ["heatsink", "CounterDuplicatesDropped", "Function", "likes-aggregator", { stat = "Sum", label = "duplicates dropped", yAxis = "right" }],
    ["heatsink", "CounterForeignRecords", "Function", "likes-aggregator", { stat = "Sum", label = "foreign records skipped", yAxis = "right" }],
  ]
}

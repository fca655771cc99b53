# The photo app's tables and stream (heatsink::schema, `heatsink schema --json`; test_module.py fails
# when they disagree); the blocks (main.tf) create counters, hotkeys and leases, autopilot.tf the
# autopilot's. Contributor Insights on every table and GSI comes from modules/hot-key-guard.

# Shards and mode from infra/esm.json (esm.tf): 13 provisioned shards carry 10,000 likes/s at 77 %
# of a shard's 1,000 records/s.
resource "aws_kinesis_stream" "like_events" {
  name             = "${var.prefix}like-events"
  shard_count      = local.esm.stream_mode == "PROVISIONED" ? local.esm.shards : null
  retention_period = 24
  encryption_type  = "KMS"
  kms_key_id       = "alias/aws/kinesis"

  stream_mode_details {
    stream_mode = local.esm.stream_mode
  }

  tags = var.tags
}

resource "aws_dynamodb_table" "liked" {
  name             = "${var.prefix}liked"
  billing_mode     = "PAY_PER_REQUEST"
  hash_key         = "user"
  range_key        = "post"
  stream_enabled   = true
  stream_view_type = "NEW_AND_OLD_IMAGES"

  attribute {
    name = "user"
    type = "S"
  }

  attribute {
    name = "post"
    type = "S"
  }

  attribute {
    name = "post_shard"
    type = "S"
  }

  attribute {
    name = "liked_at"
    type = "N"
  }

  # The rebuilder recounts one post's minute through it; write-sharded `<post>#<n>`.
  global_secondary_index {
    name            = "by-post"
    hash_key        = "post_shard"
    range_key       = "liked_at"
    projection_type = "ALL"
  }

  point_in_time_recovery {
    enabled = true
  }

  # A destroy or a replacement must not take the data with it.
  deletion_protection_enabled = true

  tags = var.tags
}

# liked is insert-only: the counter repair's proof rests on it. Every principal is refused a delete
# or an update (AccessDeniedException naming this policy); likes-api writes conditional inserts
# only. A like that must go is deleted with writes stopped after removing this statement, then
# `heatsink rebuild` (docs/counters.md).
resource "aws_dynamodb_resource_policy" "liked_insert_only" {
  resource_arn = aws_dynamodb_table.liked.arn
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "InsertOnly"
      Effect    = "Deny"
      Principal = { AWS = "*" }
      Action    = ["dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:PartiQLDelete", "dynamodb:PartiQLUpdate"]
      Resource  = aws_dynamodb_table.liked.arn
    }]
  })
}

# Only when like-events is the aggregator's source; with dynamodb-streams the stream stays, unfed by the table.
resource "aws_dynamodb_kinesis_streaming_destination" "liked" {
  count      = var.like_events_source == "kinesis" ? 1 : 0
  table_name = aws_dynamodb_table.liked.name
  stream_arn = aws_kinesis_stream.like_events.arn
}




resource "aws_dynamodb_table" "posts" {
  name         = "${var.prefix}posts"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "post"

  attribute {
    name = "post"
    type = "S"
  }

  attribute {
    name = "creator_shard"
    type = "S"
  }

  attribute {
    name = "created_at"
    type = "S"
  }

  global_secondary_index {
    name            = "by-creator"
    hash_key        = "creator_shard"
    range_key       = "created_at"
    projection_type = "ALL"
  }

  point_in_time_recovery {
    enabled = true
  }

  # A destroy or a replacement must not take the data with it.
  deletion_protection_enabled = true

  tags = var.tags
}

locals {
  # The six tables of heatsink::schema: the photo app's own two, the blocks' three, the autopilot's.
  tables = {
    liked     = { name = aws_dynamodb_table.liked.name, arn = aws_dynamodb_table.liked.arn }
    counters  = { name = module.counter.counters_table_name, arn = module.counter.counters_table_arn }
    hotkeys   = { name = module.guard.directory_table_name, arn = module.guard.directory_table_arn }
    leases    = { name = module.leases.table_name, arn = module.leases.table_arn }
    posts     = { name = aws_dynamodb_table.posts.name, arn = aws_dynamodb_table.posts.arn }
    autopilot = { name = aws_dynamodb_table.autopilot.name, arn = aws_dynamodb_table.autopilot.arn }
  }
}

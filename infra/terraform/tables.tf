# The tables and the stream of heatsink::schema (`heatsink schema --json`); test_module.py fails when
# they disagree. Contributor Insights is enabled on every table and GSI (contributor_insights.tf).

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

# Only when like-events is the aggregator's source; with dynamodb-streams the stream stays, unfed by the table.
resource "aws_dynamodb_kinesis_streaming_destination" "liked" {
  count      = var.like_events_source == "kinesis" ? 1 : 0
  table_name = aws_dynamodb_table.liked.name
  stream_arn = aws_kinesis_stream.like_events.arn
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

  # Writer sub-keys by their newest time bucket, write-sharded: what changed since a rebuild.
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

resource "aws_dynamodb_table" "leases" {
  name         = "${var.prefix}leases"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "app"
  range_key    = "shard_id"

  attribute {
    name = "app"
    type = "S"
  }

  attribute {
    name = "shard_id"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  # A destroy or a replacement must not take the data with it.
  deletion_protection_enabled = true

  tags = var.tags
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
  tables = {
    liked    = aws_dynamodb_table.liked
    counters = aws_dynamodb_table.counters
    hotkeys  = aws_dynamodb_table.hotkeys
    leases   = aws_dynamodb_table.leases
    posts    = aws_dynamodb_table.posts
  }
  # (table, index) pairs: every table plus every GSI.
  table_targets = merge(
    { for k, t in local.tables : k => { table = t.name, index = null } },
    { "posts-by-creator" = { table = aws_dynamodb_table.posts.name, index = "by-creator" } },
    { "liked-by-post" = { table = aws_dynamodb_table.liked.name, index = "by-post" } },
    { "counters-touched" = { table = aws_dynamodb_table.counters.name, index = "touched" } },
  )
}

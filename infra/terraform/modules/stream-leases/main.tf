# A lease table for heatsink::stream::Worker consumers (lineage-ordered, one lease per shard,
# fenced takeovers) and the grants a consumer needs: exactly the lease table's calls, and the
# reads of the streams it consumes. Consumers run outside the block (an ECS service,
# `heatsink tail`): name their roles in consumer_role_names, or attach consumer_policy_json.
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = { source = "hashicorp/aws", version = ">= 5.100" }
  }
}

variable "table_name" {
  description = "The lease table's name (<prefix>leases in the photo app)."
  type        = string
}

variable "consumer_role_names" {
  description = "IAM roles of the consumers: each gets an inline policy with the lease table's calls and the stream reads."
  type        = list(string)
  default     = []
}

variable "stream_arns" {
  description = "Kinesis streams the consumers read (polling and enhanced fan-out)."
  type        = list(string)
  default     = []
}

variable "tags" {
  type    = map(string)
  default = {}
}

resource "aws_dynamodb_table" "leases" {
  name         = var.table_name
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

locals {
  consumer_statements = concat(
    # The calls heatsink::stream::LeaseTable makes.
    [{ Effect = "Allow", Action = ["dynamodb:BatchGetItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"], Resource = aws_dynamodb_table.leases.arn }],
    length(var.stream_arns) == 0 ? [] : [
      { Effect = "Allow", Action = ["kinesis:DescribeStreamConsumer", "kinesis:DescribeStreamSummary", "kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards", "kinesis:RegisterStreamConsumer", "kinesis:SubscribeToShard"], Resource = var.stream_arns },
    ],
  )
}

resource "aws_iam_role_policy" "consumer" {
  for_each = toset(var.consumer_role_names)
  name     = "${var.table_name}-consumer"
  role     = each.value
  policy   = jsonencode({ Version = "2012-10-17", Statement = local.consumer_statements })
}

output "table_name" {
  value = aws_dynamodb_table.leases.name
}

output "table_arn" {
  value = aws_dynamodb_table.leases.arn
}

output "consumer_policy_json" {
  description = "The consumer's grants as a policy document, to attach to a role the module does not know."
  value       = jsonencode({ Version = "2012-10-17", Statement = local.consumer_statements })
}

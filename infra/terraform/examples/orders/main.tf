# Protect your own table: a team's `orders` table, counted by `customer`, with the hot-key guard on
# it. Nothing here is the photo app: the blocks take your table's name, ARN and stream.
#
# `orders` is keyed by order_id; each order also carries customer, ordered_at (Unix ms) and
# customer_shard (<customer>#<n>, n in 0..16, spread by the writer), which the repair's
# write-sharded index by-customer needs. The counter keeps orders#<customer> in orders-counters
# from the table's own stream; the guard watches orders, its index and the counters (Contributor
# Insights, throttle and hot-partition alarms), and its controller names hot customers whose count
# is read hot, for readers using the hot-key directory.
#
#   terraform init && terraform apply -var lambda_dir=../../../../target/lambda    (make lambdas first)
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = { source = "hashicorp/aws", version = ">= 6.11" }
  }
}

variable "lambda_dir" {
  description = "Directory holding <function>/bootstrap.zip (make lambdas: target/lambda)."
  type        = string
  default     = "../../../../target/lambda"
}

resource "aws_dynamodb_table" "orders" {
  name             = "orders"
  billing_mode     = "PAY_PER_REQUEST"
  hash_key         = "order_id"
  stream_enabled   = true
  stream_view_type = "NEW_AND_OLD_IMAGES"

  attribute {
    name = "order_id"
    type = "S"
  }

  attribute {
    name = "customer_shard"
    type = "S"
  }

  attribute {
    name = "ordered_at"
    type = "N"
  }

  global_secondary_index {
    name            = "by-customer"
    hash_key        = "customer_shard"
    range_key       = "ordered_at"
    projection_type = "KEYS_ONLY"
  }

  point_in_time_recovery {
    enabled = true
  }

  deletion_protection_enabled = true
}

module "alarms" {
  source     = "../../modules/alarm-topic"
  topic_name = "orders-alarms"
}

module "orders_per_customer" {
  source          = "../../modules/hot-key-counter"
  prefix          = "orders-"
  table_name      = aws_dynamodb_table.orders.name
  table_arn       = aws_dynamodb_table.orders.arn
  count_by        = "customer"
  counter         = "orders"
  time_attribute  = "ordered_at"
  source_kind     = "dynamodb-streams"
  source_arn      = aws_dynamodb_table.orders.stream_arn
  alarm_topic_arn = module.alarms.topic_arn
  lambda_dir      = var.lambda_dir
}

module "guard" {
  source = "../../modules/hot-key-guard"
  prefix = "orders-"
  tables = {
    orders = { name = aws_dynamodb_table.orders.name, arn = aws_dynamodb_table.orders.arn, indexes = ["by-customer"] }
    # A hot customer's count is read on every page: the controller marks it read-hot.
    counters = { name = module.orders_per_customer.counters_table_name, arn = module.orders_per_customer.counters_table_arn, indexes = ["touched"], hot = "read" }
  }
  capacity_log_group_names = module.orders_per_customer.log_group_names
  alarm_topic_arn          = module.alarms.topic_arn
  lambda_dir               = var.lambda_dir
}

output "alarm_topic_arn" {
  description = "Subscribe your pager here."
  value       = module.alarms.topic_arn
}

output "counters_table_name" {
  description = "Read orders#<customer> here (heatsink::counter::CounterStore)."
  value       = module.orders_per_customer.counters_table_name
}

output "sampler_publisher_role_arn" {
  description = "Routers embedding heatsink assume this role to report hot keys to the guard."
  value       = module.guard.sampler_publisher_role_arn
}

# A team's geohash `places` slot directory, governed by the directory autopilot. Nothing here is the
# photo app: the block takes your directory's and your owner tables' names, ARNs and streams.
#
# places-slots maps key-slot ranges of the places' geohash keys to owner tables (heatsink::slots,
# ordered keying); places-a and places-b own the ranges today and places-c is an empty spare a move
# may fill. Every owner has a NEW_AND_OLD_IMAGES stream (a move catches up on the source's changes
# from it). The autopilot reads each owner's consumed write capacity from CloudWatch every 5 minutes
# and reports which ranges it would move off a hotter owner: a dry run, whose role cannot write the
# directory's entries or any owner's items. -var act=true lets it move.
#
#   terraform init && terraform apply -var lambda_dir=../../../../target/lambda    (make lambdas first)
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = { source = "hashicorp/aws", version = ">= 5.100" }
  }
}

variable "lambda_dir" {
  description = "Directory holding <function>/bootstrap.zip (make lambdas: target/lambda)."
  type        = string
  default     = "../../../../target/lambda"
}

variable "act" {
  description = "Let the autopilot move slot ranges (and its role write the directory and the owner tables); false: a dry run."
  type        = bool
  default     = false
}

# The team's slot directory (not heatsink's): its entries, and the autopilot's state and kill switch.
resource "aws_dynamodb_table" "directory" {
  name         = "places-slots"
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

  point_in_time_recovery {
    enabled = true
  }

  deletion_protection_enabled = true
}

# The owner tables the directory names (places-a, places-b) and a spare (places-c): the same key
# schema, each with a stream.
resource "aws_dynamodb_table" "a" {
  name             = "places-a"
  billing_mode     = "PAY_PER_REQUEST"
  hash_key         = "pk"
  range_key        = "sk"
  stream_enabled   = true
  stream_view_type = "NEW_AND_OLD_IMAGES"

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  deletion_protection_enabled = true
}

resource "aws_dynamodb_table" "b" {
  name             = "places-b"
  billing_mode     = "PAY_PER_REQUEST"
  hash_key         = "pk"
  range_key        = "sk"
  stream_enabled   = true
  stream_view_type = "NEW_AND_OLD_IMAGES"

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  deletion_protection_enabled = true
}

resource "aws_dynamodb_table" "c" {
  name             = "places-c"
  billing_mode     = "PAY_PER_REQUEST"
  hash_key         = "pk"
  range_key        = "sk"
  stream_enabled   = true
  stream_view_type = "NEW_AND_OLD_IMAGES"

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  deletion_protection_enabled = true
}

module "alarms" {
  source     = "../../modules/alarm-topic"
  topic_name = "places-alarms"
}

module "autopilot" {
  source               = "../../modules/directory-autopilot"
  prefix               = "places-"
  directory_table_name = aws_dynamodb_table.directory.name
  directory_table_arn  = aws_dynamodb_table.directory.arn
  owner_tables = [
    { name = aws_dynamodb_table.a.name, arn = aws_dynamodb_table.a.arn, stream_arn = aws_dynamodb_table.a.stream_arn },
    { name = aws_dynamodb_table.b.name, arn = aws_dynamodb_table.b.arn, stream_arn = aws_dynamodb_table.b.stream_arn },
    { name = aws_dynamodb_table.c.name, arn = aws_dynamodb_table.c.arn, stream_arn = aws_dynamodb_table.c.stream_arn },
  ]
  spare_table_names = [aws_dynamodb_table.c.name]
  act               = var.act
  alarm_topic_arn   = module.alarms.topic_arn
  lambda_dir        = var.lambda_dir
}

output "alarm_topic_arn" {
  description = "Subscribe your pager here."
  value       = module.alarms.topic_arn
}

output "autopilot_function_name" {
  description = "The loop; pause it with `heatsink autopilot pause --prefix places- --reason ...`."
  value       = module.autopilot.function_name
}

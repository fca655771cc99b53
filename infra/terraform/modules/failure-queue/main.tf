# A queue that parks failures (stream batch pointers, failed asynchronous invocations with their
# event, events EventBridge could not deliver): TLS only, kept 14 days, encrypted with a key of its
# own (alias/<name>, rotated): EventBridge can park events only in a queue whose key lets it
# encrypt, which an AWS-managed key never does. The key lets events.amazonaws.com of this account
# encrypt; the functions that park failures get kms:GenerateDataKey and kms:Decrypt on it with
# their send grants. Internal to the blocks.
terraform {
  required_providers {
    aws = { source = "hashicorp/aws" }
  }
}

variable "name" { type = string }

variable "eventbridge_rule_arns" {
  description = "EventBridge rules whose undeliverable events are parked here (their targets' dead-letter queue)."
  type        = list(string)
  default     = []
}

variable "tags" { type = map(string) }

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

resource "aws_kms_key" "this" {
  description         = "${var.name}: failures parked by Lambda and EventBridge"
  enable_key_rotation = true
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdministers"
        Effect    = "Allow"
        Principal = { AWS = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "EventBridgeParksEvents"
        Effect    = "Allow"
        Principal = { Service = "events.amazonaws.com" }
        Action    = ["kms:Decrypt", "kms:GenerateDataKey"]
        Resource  = "*"
        Condition = { StringEquals = { "aws:SourceAccount" = data.aws_caller_identity.current.account_id } }
      },
    ]
  })
  tags = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.this.key_id
}

resource "aws_sqs_queue" "this" {
  name                      = var.name
  kms_master_key_id         = aws_kms_key.this.arn
  message_retention_seconds = 1209600
  tags                      = var.tags
}

resource "aws_sqs_queue_policy" "this" {
  queue_url = aws_sqs_queue.this.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat(
      [{
        Sid       = "EnforceTls"
        Effect    = "Deny"
        Principal = "*"
        Action    = "sqs:*"
        Resource  = aws_sqs_queue.this.arn
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      }],
      length(var.eventbridge_rule_arns) == 0 ? [] : [{
        Sid       = "EventBridgeDeadLetters"
        Effect    = "Allow"
        Principal = { Service = "events.amazonaws.com" }
        Action    = "sqs:SendMessage"
        Resource  = aws_sqs_queue.this.arn
        Condition = { ArnEquals = { "aws:SourceArn" = var.eventbridge_rule_arns } }
      }],
    )
  })
}

output "arn" { value = aws_sqs_queue.this.arn }
output "name" { value = aws_sqs_queue.this.name }
output "url" { value = aws_sqs_queue.this.id }
output "key_arn" { value = aws_kms_key.this.arn }

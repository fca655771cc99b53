# A queue that parks failures (stream batch pointers, failed asynchronous invocations, events
# EventBridge could not deliver): encrypted, TLS only, kept 14 days. Internal to the blocks.
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

resource "aws_sqs_queue" "this" {
  name                      = var.name
  sqs_managed_sse_enabled   = true
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

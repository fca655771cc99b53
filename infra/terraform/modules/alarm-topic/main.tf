# An SNS topic CloudWatch alarms can publish to, encrypted with a customer-managed key: the
# AWS-managed alias/aws/sns key's policy cannot be changed to let CloudWatch use it, and an alarm
# action to a topic CloudWatch cannot encrypt for fails. CloudWatch may use the key and publish
# for this account's alarms only (aws:SourceAccount). Subscribe a pager to the topic.
terraform {
  required_providers {
    aws = { source = "hashicorp/aws" }
  }
}

variable "topic_name" {
  description = "The topic's name (<prefix>alarms in the photo app); the key's alias is alias/<topic_name>."
  type        = string
}

variable "tags" {
  type    = map(string)
  default = {}
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

resource "aws_kms_key" "this" {
  description         = "${var.topic_name} SNS topic: CloudWatch alarms may encrypt messages to it"
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
        Sid       = "CloudWatchAlarmsPublishEncrypted"
        Effect    = "Allow"
        Principal = { Service = "cloudwatch.amazonaws.com" }
        Action    = ["kms:Decrypt", "kms:GenerateDataKey*"]
        Resource  = "*"
        # Alarms of this account only: no other account's CloudWatch can use the key.
        Condition = { StringEquals = { "aws:SourceAccount" = data.aws_caller_identity.current.account_id } }
      },
    ]
  })
  tags = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.topic_name}"
  target_key_id = aws_kms_key.this.key_id
}

resource "aws_sns_topic" "this" {
  name              = var.topic_name
  kms_master_key_id = aws_kms_key.this.arn
  tags              = var.tags
}

resource "aws_sns_topic_policy" "this" {
  arn = aws_sns_topic.this.arn
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "EnforceTls"
        Effect    = "Deny"
        Principal = "*"
        Action    = "sns:Publish"
        Resource  = aws_sns_topic.this.arn
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      },
      {
        Sid       = "CloudWatchAlarms"
        Effect    = "Allow"
        Principal = { Service = "cloudwatch.amazonaws.com" }
        Action    = "sns:Publish"
        Resource  = aws_sns_topic.this.arn
        Condition = { StringEquals = { "aws:SourceAccount" = data.aws_caller_identity.current.account_id } }
      },
    ]
  })
}

output "topic_arn" {
  description = "Pass it to the blocks' alarm_topic_arn; subscribe people or pagers here."
  value       = aws_sns_topic.this.arn
}

output "key_arn" { value = aws_kms_key.this.arn }

# One heatsink function: its own log group, its own role (no managed policy: its own log streams
# plus exactly the statements the caller passes, each a call the function's code makes) and the
# function. Internal to the blocks.
terraform {
  required_providers {
    aws = { source = "hashicorp/aws" }
  }
}

variable "function_name" { type = string }
variable "binary" {
  description = "Which heatsink function binary: likes-api, likes-aggregator, count-rebuilder or hotkey-controller."
  type        = string
}
variable "description" { type = string }
variable "memory" { type = number }
variable "timeout" { type = number }
variable "reserved_concurrency" { type = number }
variable "lambda_dir" { type = string }
variable "architecture" { type = string }
variable "environment" { type = map(string) }
variable "log_retention_days" { type = number }
variable "statements" {
  description = "IAM statements of the role besides its own log streams."
  type        = any
}
variable "tags" { type = map(string) }
variable "tracing" {
  description = "X-Ray tracing: PassThrough (a trace only when the caller sampled one; free on the hot paths) or Active (about 500 traces/s at 10,000 likes/s, roughly $6,500 a month)."
  type        = string
  default     = "PassThrough"

  validation {
    condition     = contains(["PassThrough", "Active"], var.tracing)
    error_message = "tracing must be PassThrough or Active."
  }
}

resource "aws_cloudwatch_log_group" "this" {
  name              = "/aws/lambda/${var.function_name}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "this" {
  name               = var.function_name
  description        = "${var.function_name}: least-privilege execution role"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "this" {
  name = var.function_name
  role = aws_iam_role.this.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat(
      [
        { Effect = "Allow", Action = ["logs:CreateLogStream", "logs:PutLogEvents"], Resource = "${aws_cloudwatch_log_group.this.arn}:*" },
        # The Lambda service sends the function's trace segments as the role; these two actions take
        # no resource ("*", the only such grant).
        { Effect = "Allow", Action = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"], Resource = "*" },
      ],
      var.statements,
    )
  })
}

resource "aws_lambda_function" "this" {
  function_name    = var.function_name
  description      = var.description
  role             = aws_iam_role.this.arn
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = [var.architecture]
  filename         = "${var.lambda_dir}/${var.binary}/bootstrap.zip"
  source_code_hash = filebase64sha256("${var.lambda_dir}/${var.binary}/bootstrap.zip")
  memory_size      = var.memory
  timeout          = var.timeout
  # A cap (and a reserve) per function: a flood on one cannot starve another.
  reserved_concurrent_executions = var.reserved_concurrency

  tracing_config {
    mode = var.tracing
  }

  logging_config {
    log_format = "Text"
    log_group  = aws_cloudwatch_log_group.this.name
  }

  environment {
    variables = var.environment
  }

  tags = var.tags
  # The role's policy must be in place before an event source mapping checks it.
  depends_on = [aws_iam_role_policy.this]
}

output "function_name" { value = aws_lambda_function.this.function_name }
output "arn" { value = aws_lambda_function.this.arn }
output "invoke_arn" { value = aws_lambda_function.this.invoke_arn }
output "role_name" { value = aws_iam_role.this.name }
output "role_arn" { value = aws_iam_role.this.arn }
output "log_group_name" { value = aws_cloudwatch_log_group.this.name }

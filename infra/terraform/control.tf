# The control plane: routers put sampler reports on a bus of their own, as one role. The default
# bus is open to any principal with events:PutEvents, so the reports never go there.
resource "aws_iam_role" "sampler_publisher" {
  name        = "${var.prefix}sampler-publisher"
  description = "Routers assume this role to publish heatsink sampler reports to ${var.prefix}control"
  # Account administrators decide which routers' roles may assume it (sts:AssumeRole in their policies).
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { AWS = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root" }
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy" "sampler_publisher" {
  name = "${var.prefix}sampler-publisher"
  role = aws_iam_role.sampler_publisher.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "events:PutEvents"
      Resource  = aws_cloudwatch_event_bus.control.arn
      Condition = { StringEquals = { "events:source" = local.sampler_source } }
    }]
  })
}

resource "aws_cloudwatch_event_bus" "control" {
  name = "${var.prefix}control"
  tags = var.tags
}

resource "aws_cloudwatch_event_bus_policy" "control" {
  event_bus_name = aws_cloudwatch_event_bus.control.name
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "OnlyTheSamplerPublisher"
      Effect    = "Deny"
      Principal = { AWS = "*" }
      Action    = "events:PutEvents"
      Resource  = aws_cloudwatch_event_bus.control.arn
      Condition = { ArnNotEquals = { "aws:PrincipalArn" = aws_iam_role.sampler_publisher.arn } }
    }]
  })
}

# likes-api behind an HTTP API (the function itself: main.tf, module.likes_api).
# ---- likes-api: HTTP API ----------------------------------------------------------------------
resource "aws_cloudwatch_log_group" "api_access" {
  name              = "/aws/http-api/${var.prefix}likes"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_apigatewayv2_api" "likes" {
  name          = "${var.prefix}likes"
  protocol_type = "HTTP"
  tags          = var.tags
}

resource "aws_apigatewayv2_integration" "likes_api" {
  api_id                 = aws_apigatewayv2_api.likes.id
  integration_type       = "AWS_PROXY"
  integration_uri        = module.likes_api.arn
  payload_format_version = "2.0"
}

# Every route, the write first, needs a valid JWT (auth.tf); likes-api reads the verified `sub`.
resource "aws_apigatewayv2_route" "post_like" {
  api_id             = aws_apigatewayv2_api.likes.id
  route_key          = "POST /posts/{post}/likes"
  target             = "integrations/${aws_apigatewayv2_integration.likes_api.id}"
  authorization_type = "JWT"
  authorizer_id      = aws_apigatewayv2_authorizer.likes_jwt.id
}

resource "aws_apigatewayv2_route" "get_post" {
  api_id             = aws_apigatewayv2_api.likes.id
  route_key          = "GET /posts/{post}"
  target             = "integrations/${aws_apigatewayv2_integration.likes_api.id}"
  authorization_type = "JWT"
  authorizer_id      = aws_apigatewayv2_authorizer.likes_jwt.id
}

resource "aws_apigatewayv2_stage" "default" {
  api_id      = aws_apigatewayv2_api.likes.id
  name        = "$default"
  auto_deploy = true

  # The stage-wide ceiling bounds the total; behind it likes-api's per-user and per-post admission
  # (429 + Retry-After) and its reserved concurrency.
  default_route_settings {
    throttling_rate_limit  = 20000
    throttling_burst_limit = 5000
  }

  access_log_settings {
    destination_arn = aws_cloudwatch_log_group.api_access.arn
    # One JSON line per request. No source IP unless var.access_log_source_ip: the route, status and
    # request id are enough to find a flood's route; an IP is personal data.
    format = jsonencode(merge(
      { requestId = "$context.requestId", requestTime = "$context.requestTime", routeKey = "$context.routeKey", status = "$context.status", responseLength = "$context.responseLength" },
      var.access_log_source_ip ? { ip = "$context.identity.sourceIp" } : {},
    ))
  }

  tags = var.tags
}

resource "aws_lambda_permission" "api" {
  statement_id  = "http-api"
  action        = "lambda:InvokeFunction"
  function_name = module.likes_api.function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.likes.execution_arn}/*/*/posts/*"
}

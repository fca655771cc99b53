# Who may call the likes API: var.jwt_issuer, or a Cognito user pool of the module's own
# (admin-created users, MFA required). likes-api takes the liking user from the verified `sub`.
locals {
  own_pool     = var.jwt_issuer == ""
  jwt_issuer   = local.own_pool ? "https://${aws_cognito_user_pool.users[0].endpoint}" : var.jwt_issuer
  jwt_audience = local.own_pool ? [aws_cognito_user_pool_client.likes[0].id] : var.jwt_audience
}

resource "aws_cognito_user_pool" "users" {
  count                    = local.own_pool ? 1 : 0
  name                     = "${var.prefix}users"
  username_attributes      = ["email"]
  auto_verified_attributes = ["email"]
  mfa_configuration        = "ON"
  deletion_protection      = "ACTIVE"

  admin_create_user_config {
    allow_admin_create_user_only = true
  }

  software_token_mfa_configuration {
    enabled = true
  }

  password_policy {
    minimum_length    = 12
    require_lowercase = true
    require_uppercase = true
    require_numbers   = true
    require_symbols   = true
  }

  account_recovery_setting {
    recovery_mechanism {
      name     = "verified_email"
      priority = 1
    }
  }

  tags = var.tags
}

resource "aws_cognito_user_pool_client" "likes" {
  count                         = local.own_pool ? 1 : 0
  name                          = "${var.prefix}likes"
  user_pool_id                  = aws_cognito_user_pool.users[0].id
  generate_secret               = false
  explicit_auth_flows           = ["ALLOW_USER_SRP_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"]
  prevent_user_existence_errors = "ENABLED"
}

resource "aws_apigatewayv2_authorizer" "likes_jwt" {
  api_id           = aws_apigatewayv2_api.likes.id
  name             = "${var.prefix}likes-jwt"
  authorizer_type  = "JWT"
  identity_sources = ["$request.header.Authorization"]

  jwt_configuration {
    issuer   = local.jwt_issuer
    audience = local.jwt_audience
  }
}

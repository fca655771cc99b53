output "likes_api_url" {
  description = "Base URL of the likes HTTP API."
  value       = aws_apigatewayv2_stage.default.invoke_url
}

output "table_names" {
  description = "The six tables, by logical name."
  value       = { for k, t in local.tables : k => t.name }
}

output "like_events_stream_arn" {
  value = aws_kinesis_stream.like_events.arn
}

output "alarm_topic_arn" {
  description = "Subscribe people or pagers here; every heatsink alarm publishes to it."
  value       = module.alarm_topic.topic_arn
}

output "function_names" {
  value = merge({ "likes-api" = module.likes_api.function_name, "hotkey-controller" = module.guard.function_name, "autopilot" = module.autopilot.function_name }, module.counter.function_names)
}

output "sampler_publisher_role_arn" {
  description = "Routers assume this role to publish sampler reports to the control bus."
  value       = module.guard.sampler_publisher_role_arn
}

output "control_bus_name" {
  description = "The event bus routers publish sampler reports to (EventBridgeSink bus)."
  value       = module.guard.control_bus_name
}

output "user_pool_id" {
  description = "The likes API's Cognito user pool (empty with jwt_issuer)."
  value       = local.own_pool ? aws_cognito_user_pool.users[0].id : ""
}

output "user_pool_client_id" {
  description = "The app client whose tokens the likes API accepts (empty with jwt_issuer)."
  value       = local.own_pool ? aws_cognito_user_pool_client.likes[0].id : ""
}

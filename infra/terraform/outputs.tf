output "likes_api_url" {
  description = "Base URL of the likes HTTP API."
  value       = aws_apigatewayv2_stage.default.invoke_url
}

output "table_names" {
  description = "The five tables, by logical name."
  value       = { for k, t in local.tables : k => t.name }
}

output "like_events_stream_arn" {
  value = aws_kinesis_stream.like_events.arn
}

output "alarm_topic_arn" {
  description = "Subscribe people or pagers here; every heatsink alarm publishes to it."
  value       = aws_sns_topic.alarms.arn
}

output "function_names" {
  value = { for k, f in aws_lambda_function.function : k => f.function_name }
}

output "sampler_publisher_policy_arn" {
  description = "Attach to the roles of routers that publish sampler reports."
  value       = aws_iam_policy.sampler_publisher.arn
}

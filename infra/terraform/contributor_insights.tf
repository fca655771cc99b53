# DynamoDB Contributor Insights on every table and GSI. The AWS provider (5.x) has no `mode`
# argument yet, so Terraform gets DynamoDB's default mode (ACCESSED_AND_THROTTLED_KEYS); the CDK
# app's heatsink:contributorInsightsMode can switch to THROTTLED_KEYS.
resource "aws_dynamodb_contributor_insights" "tables" {
  for_each   = local.table_targets
  table_name = each.value.table
  index_name = each.value.index
}

# heatsink's own rules over the functions' JSON logs (DynamoDB names its managed rules with a
# creation timestamp, so alarms cannot reference those). Field paths (tracing's JSON layout nests
# an event's fields under `fields`): infra/cdk/lib/observability.ts.
locals {
  function_log_groups = [for name in local.function_names : "/aws/lambda/${var.prefix}${name}"]

  capacity_rules = merge([
    for k, target in local.table_targets : {
      for unit in ["wcu", "rcu"] : "${var.prefix}${k}-partition-${unit}" => {
        table   = target.table
        index   = target.index
        unit    = unit
        ceiling = unit == "wcu" ? 1000 : 3000
      }
    }
  ]...)

  # No rule on Kinesis puts: no function puts to a stream (the table's streaming destination does).
  insight_rules = merge(
    { for name, r in local.capacity_rules : name => { ceiling = r.ceiling, body = jsonencode({
      Schema        = { Name = "CloudWatchLogRule", Version = 1 }
      LogGroupNames = local.function_log_groups
      LogFormat     = "JSON"
      Contribution = {
        Keys    = ["$.fields.partition_key"]
        ValueOf = r.unit == "wcu" ? "$.fields.consumed_wcu" : "$.fields.consumed_rcu"
        Filters = [
          { Match = "$.fields.table", In = [r.table] },
          r.index == null ? { Match = "$.fields.index", IsPresent = false } : { Match = "$.fields.index", In = [r.index] },
        ]
      }
      AggregateOn = "Sum"
    }) } },
  )
}

resource "aws_cloudwatch_contributor_insight_rule" "partition" {
  for_each        = local.insight_rules
  rule_name       = each.key
  rule_state      = "ENABLED"
  rule_definition = each.value.body
  tags            = var.tags

  depends_on = [aws_cloudwatch_log_group.function]
}

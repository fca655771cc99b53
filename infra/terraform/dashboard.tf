# The photo app's dashboard: the guard's and the counter's widgets, then the app's own.
data "aws_region" "current" {}

locals {
  region = data.aws_region.current.name
  # EMF series of the app's own widgets, each with the one emitter that writes it
  # (heatsink::metrics::Metric::emitter). Leases come from stream consumers outside the module
  # (`heatsink tail --emf`, or a service embedding heatsink::stream::Worker with emit_emf).
  emf = {
    leases_held   = ["heatsink", "LeasesHeld", "Function", "stream-consumer", { stat = "Maximum", label = "held (max per worker)" }]
    leases_expire = ["heatsink", "LeasesExpired", "Function", "stream-consumer", { stat = "Sum", label = "expired, taken over" }]
    rejected      = ["heatsink", "AdmissionRejected", "Function", "likes-api", { stat = "Sum" }]
  }

  app_widgets = [
    {
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Stream consumer leases (heatsink tail --emf or an embedding service)", region = local.region, view = "timeSeries", period = 60
        metrics = [local.emf.leases_held, local.emf.leases_expire]
      }
    },
    {
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Admission: 429s from likes-api", region = local.region, view = "timeSeries", period = 60
        metrics = [local.emf.rejected]
      }
    },
    {
      type = "metric", width = 8, height = 6
      properties = {
        title       = "like-events: incoming records vs shard ceiling", region = local.region, view = "timeSeries", period = 60
        metrics     = [["AWS/Kinesis", "IncomingRecords", "StreamName", aws_kinesis_stream.like_events.name, { stat = "Sum" }]]
        annotations = { horizontal = [{ value = 1000 * 60 * aws_kinesis_stream.like_events.shard_count, label = "all shards, records/min" }] }
      }
    },
  ]

  alarm_widget = {
    type = "alarm", width = 24, height = 8
    properties = {
      title = "heatsink alarms"
      alarms = concat(
        module.guard.alarm_arns,
        module.counter.alarm_arns,
        [for a in aws_cloudwatch_metric_alarm.autopilot : a.arn],
        [for a in aws_cloudwatch_metric_alarm.photo : a.arn],
        [aws_cloudwatch_metric_alarm.api_p99_latency.arn],
      )
    }
  }
}

resource "aws_cloudwatch_dashboard" "overview" {
  dashboard_name = "${var.prefix}overview"
  dashboard_body = jsonencode({
    widgets = concat(
      [{
        type       = "text", width = 24, height = 2
        properties = { markdown = "# heatsink (${var.prefix})\nHottest partition key per table vs the per-partition ceiling (1,000 WCU/s, 3,000 RCU/s, 1,000 records/s per shard)." }
      }],
      module.guard.dashboard_widgets,
      module.counter.dashboard_widgets,
      local.autopilot_widgets,
      local.app_widgets,
      [local.alarm_widget],
    )
  })
}

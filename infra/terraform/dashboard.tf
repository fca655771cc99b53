locals {
  region = data.aws_region.current.name
  # EMF series, each with the one emitter that writes it (heatsink::metrics::Metric::emitter; a
  # Rust unit test checks every line). Leases come from stream consumers outside the module
  # (`heatsink tail --emf`, or a service embedding heatsink::stream::Worker with emit_emf).
  emf = {
    counter_lag   = ["heatsink", "CounterLagEvents", "Function", "likes-aggregator", { stat = "Maximum" }]
    flush_delay   = ["heatsink", "CounterFlushDelaySeconds", "Function", "likes-aggregator", { stat = "Maximum", yAxis = "right" }]
    leases_held   = ["heatsink", "LeasesHeld", "Function", "stream-consumer", { stat = "Maximum", label = "held (max per worker)" }]
    leases_expire = ["heatsink", "LeasesExpired", "Function", "stream-consumer", { stat = "Sum", label = "expired, taken over" }]
    hot_keys      = ["heatsink", "HotKeys", "Function", "hotkey-controller", { stat = "Maximum", label = "keys in the directory" }]
    rejected      = ["heatsink", "AdmissionRejected", "Function", "likes-api", { stat = "Sum" }]
    corrected     = ["heatsink", "CounterCorrectionLikes", "Function", "count-rebuilder", { stat = "Sum", label = "likes corrected" }]
    counters_fix  = ["heatsink", "CountersCorrected", "Function", "count-rebuilder", { stat = "Sum", label = "counters corrected" }]
    runs_done     = ["heatsink", "CounterRebuildCompleted", "Function", "count-rebuilder", { stat = "Sum", label = "runs completed", yAxis = "right" }]
    unsettled     = ["heatsink", "CountersUnsettled", "Function", "count-rebuilder", { stat = "Maximum", label = "counters unsettled", yAxis = "right" }]
  }
  # EventBridge's own count of sampler reports the rule matched (RuleName alone: the default bus).
  sampler_reports = ["AWS/Events", "MatchedEvents", "RuleName", aws_cloudwatch_event_rule.hotkey_controller_sampler_reports.name, { stat = "Sum", label = "sampler reports delivered", yAxis = "right" }]
  all_throttle_metrics = concat(local.throttle_reasons["key-range"], local.throttle_reasons["quota"], [
    "ReadProvisionedThroughputThrottleEvents", "WriteProvisionedThroughputThrottleEvents",
  ])

  capacity_widgets = [for name, rule in local.insight_rules : {
    type = "metric", width = 8, height = 6
    properties = {
      title   = "${name}: hottest partition key per second"
      region  = local.region
      view    = "timeSeries"
      period  = 60
      metrics = [[{ expression = "INSIGHT_RULE_METRIC('${name}', 'MaxContributorValue') / 60", label = "MaxContributorValue / 60", id = "e1" }]]
      yAxis   = { left = { min = 0 } }
      annotations = { horizontal = [
        { value = rule.ceiling, label = "per-partition ceiling", color = "#d62728" },
        { value = var.hot_partition_fraction * rule.ceiling, label = "alarm", color = "#ff7f0e" },
      ] }
    }
  }]

  contributor_widgets = [for name, rule in local.insight_rules : {
    type = "metric", width = 12, height = 6
    properties = {
      title       = "Top contributors: ${name}"
      region      = local.region
      view        = "timeSeries"
      period      = 60
      insightRule = { maxContributorCount = 10, orderBy = "Sum", ruleName = name }
      legend      = { position = "bottom" }
    }
  }]

  throttle_widgets = [for k, target in local.table_targets : {
    type = "metric", width = 8, height = 6
    properties = {
      title   = "Throttles by reason: ${target.table}${target.index == null ? "" : "/${target.index}"}"
      region  = local.region
      view    = "timeSeries"
      stacked = true
      period  = 60
      metrics = [for m in local.all_throttle_metrics : concat(
        ["AWS/DynamoDB", m, "TableName", target.table],
        target.index == null ? [] : ["GlobalSecondaryIndexName", target.index],
        [{ stat = "Sum", label = replace(m, "ThrottleEvents", "") }],
      )]
    }
  }]

  stream_widgets = [
    {
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Counter lag (events applied, not yet flushed) and flush delay", region = local.region, view = "timeSeries", period = 60
        metrics = [local.emf.counter_lag, local.emf.flush_delay]
      }
    },
    {
      type = "metric", width = 8, height = 6
      properties = {
        title = "Stream iterator age (ms)", region = local.region, view = "timeSeries", period = 60
        metrics = [
          ["AWS/Lambda", "IteratorAge", "FunctionName", "${var.prefix}likes-aggregator", { stat = "Maximum" }],
          ["AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds", "StreamName", aws_kinesis_stream.like_events.name, { stat = "Maximum" }],
        ]
        annotations = { horizontal = [{ value = 60000, label = "alarm" }] }
      }
    },
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
        title   = "Hot keys: directory vs sampler reports delivered", region = local.region, view = "timeSeries", period = 60
        metrics = [local.emf.hot_keys, local.sampler_reports]
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
    {
      # count-rebuilder runs every 5 minutes: one datapoint per run.
      type = "metric", width = 8, height = 6
      properties = {
        title   = "Counter corrections (count-rebuilder)", region = local.region, view = "timeSeries", period = 300
        metrics = [local.emf.corrected, local.emf.counters_fix, local.emf.unsettled, local.emf.runs_done]
      }
    },
  ]

  alarm_widget = {
    type = "alarm", width = 24, height = 8
    properties = {
      title = "heatsink alarms"
      alarms = concat(
        [for a in aws_cloudwatch_metric_alarm.hot_partition : a.arn],
        [for a in aws_cloudwatch_metric_alarm.throttled : a.arn],
        [
          aws_cloudwatch_metric_alarm.aggregator_iterator_age.arn,
          aws_cloudwatch_metric_alarm.stream_write_throttled.arn,
          aws_cloudwatch_metric_alarm.stream_failures.arn,
          aws_cloudwatch_metric_alarm.counter_corrections.arn,
        ],
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
      local.capacity_widgets,
      local.contributor_widgets,
      local.throttle_widgets,
      local.stream_widgets,
      [local.alarm_widget],
    )
  })
}

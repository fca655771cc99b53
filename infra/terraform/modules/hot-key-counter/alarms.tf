# The counter's alarms, each to the alarm topic on ALARM and OK, each with a runbook row
# (infra/README.md, "Alarms and what to do"). One resource, one entry per alarm.
locals {
  function_alarms = merge([
    for name, fn in { "likes-aggregator" = module.aggregator, "count-rebuilder" = module.rebuilder } : {
      "${name}-errors"                   = { namespace = "AWS/Lambda", metric = "Errors", dims = { FunctionName = fn.function_name }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "${var.prefix}${name} failed invocations (Lambda Errors)" }
      "${name}-throttles"                = { namespace = "AWS/Lambda", metric = "Throttles", dims = { FunctionName = fn.function_name }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "${var.prefix}${name} invocations throttled at its reserved concurrency" }
    }
  ]...)
  counter_alarms = {
    "likes-aggregator-iterator-age" = { namespace = "AWS/Lambda", metric = "IteratorAge", dims = { FunctionName = module.aggregator.function_name }, stat = "Maximum", period = 60, threshold = 60000, comparison = "GreaterThanOrEqualToThreshold", evaluation = 5, datapoints = 3, missing = "notBreaching", what = "likes-aggregator is more than 60 s behind its event source" }
    # The mapping's own counts (metrics_config EventCount): events it dropped without parking them
    # (lost to the counters until a repair), and events it parked in stream-failures.
    "likes-aggregator-dropped-events" = { namespace = "AWS/Lambda", metric = "DroppedEventCount", dims = { EventSourceMappingUUID = aws_lambda_event_source_mapping.aggregator.uuid }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "likes-aggregator's event source mapping dropped events without parking them (DroppedEventCount)" }
    "likes-aggregator-parked-events"  = { namespace = "AWS/Lambda", metric = "OnFailureDestinationDeliveredEventCount", dims = { EventSourceMappingUUID = aws_lambda_event_source_mapping.aggregator.uuid }, stat = "Sum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "likes-aggregator's event source mapping parked events in the stream-failures queue (OnFailureDestinationDeliveredEventCount)" }
    "stream-failures-age"             = { namespace = "AWS/SQS", metric = "ApproximateAgeOfOldestMessage", dims = { QueueName = module.stream_failures.name }, stat = "Maximum", period = 300, threshold = var.parked_age_alarm_seconds, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "The oldest parked batch pointer in stream-failures is ${var.parked_age_alarm_seconds / 3600} h old: replay it before its records leave the source's retention" }
    "stream-failures"                 = { namespace = "AWS/SQS", metric = "ApproximateNumberOfMessagesVisible", dims = { QueueName = module.stream_failures.name }, stat = "Maximum", period = 60, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "Stream batches were given up on and parked in the stream-failures queue" }
    # Any correction means changes were lost or applied twice between the table and the counters,
    # and count-rebuilder repaired the counts (one EMF datapoint per run, every 5 minutes).
    "counter-corrections" = { namespace = "heatsink", metric = "CounterCorrectionLikes", dims = { Function = "count-rebuilder" }, stat = "Sum", period = 300, threshold = 0, comparison = "GreaterThanThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "count-rebuilder corrected counters: changes were lost or applied twice upstream of counters (a lost batch, an aggregator fault); the counts are repaired" }
    # Heartbeat: the rebuilder emits CounterRebuildCompleted after every run (0 included), so no
    # datapoint means it stopped running or stopped succeeding.
    "count-rebuilder-heartbeat" = { namespace = "heatsink", metric = "CounterRebuildCompleted", dims = { Function = "count-rebuilder" }, stat = "SampleCount", period = 900, threshold = 1, comparison = "LessThanThreshold", evaluation = 1, datapoints = 1, missing = "breaching", what = "${var.prefix}count-rebuilder runs every 5 minutes and emits CounterRebuildCompleted each time; none for 15 minutes" }
    # A blocked run judges nothing yet still emits CounterRebuildCompleted, so the heartbeat does
    # not see it. One blocked run during a reshard is normal (a new child shard has not flushed
    # yet); three in a row mean a writer is silent. Missing data is the heartbeat's, not these.
    # Buckets are repaired only once proven progress is past them: 15 minutes behind in three
    # runs in a row means corrections are late by as much (not emitted while blocked).
    "count-rebuilder-blocked"    = { namespace = "heatsink", metric = "CounterRepairBlocked", dims = { Function = "count-rebuilder" }, stat = "Maximum", period = 300, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "count-rebuilder judged nothing in 3 runs in a row: proven progress is blocked (a shard without a watermark, replication lag past settle, or nothing proven), so no counter is repaired" }
    "count-rebuilder-repair-lag" = { namespace = "heatsink", metric = "CounterRepairLag", dims = { Function = "count-rebuilder" }, stat = "Maximum", period = 300, threshold = 900, comparison = "GreaterThanThreshold", evaluation = 3, datapoints = 3, missing = "notBreaching", what = "The aggregator's proven progress was more than 900 s behind count-rebuilder's clock in 3 runs in a row (CounterRepairLag): buckets after it are not repaired yet" }
    # The dedupe window shed identities (emitted only when above 0: no datapoint is the normal
    # case), or counted changes older than it (each may be a duplicate counted twice until the
    # bucket repair corrects it; the window, 10 s, is far above the reordering AWS shows).
    "likes-aggregator-dedupe-shed"  = { namespace = "heatsink", metric = "CounterDedupeShed", dims = { Function = "likes-aggregator" }, stat = "Sum", period = 300, threshold = 0, comparison = "GreaterThanThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "likes-aggregator's dedupe window reached its size bound and shed change identities (CounterDedupeShed): a duplicate of one counts until the bucket repair corrects it" }
    "likes-aggregator-late-changes" = { namespace = "heatsink", metric = "CounterLateChanges", dims = { Function = "likes-aggregator" }, stat = "Sum", period = 300, threshold = 0, comparison = "GreaterThanThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "likes-aggregator counted changes older than its dedupe window (CounterLateChanges): each may be a duplicate counted twice until the bucket repair corrects it" }
  }
  # The Kinesis source: the table's streaming destination (lag and failures, in AWS/DynamoDB) and
  # the stream (write throttles, readers' iterator age). Names carry the table's and stream's names.
  kinesis_alarms = var.source_kind != "kinesis" ? {} : {
    "${var.source_stream_name}-write-throttled"    = { namespace = "AWS/Kinesis", metric = "PutRecords.ThrottledRecords", dims = { StreamName = var.source_stream_name }, stat = "Sum", period = 60, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 3, datapoints = 2, missing = "notBreaching", what = "Puts to ${var.source_stream_name} exceeded a shard's 1,000 records/s or 1 MB/s" }
    "${var.table_name}-kinesis-replication-lag"    = { namespace = "AWS/DynamoDB", metric = "AgeOfOldestUnreplicatedRecord", dims = { TableName = var.table_name }, stat = "Maximum", period = 60, threshold = 60000, comparison = "GreaterThanOrEqualToThreshold", evaluation = 5, datapoints = 3, missing = "notBreaching", what = "${var.table_name} changes are more than 60 s old before reaching ${var.source_stream_name}" }
    "${var.table_name}-kinesis-replication-failed" = { namespace = "AWS/DynamoDB", metric = "FailedToReplicateRecordCount", dims = { TableName = var.table_name }, stat = "Sum", period = 60, threshold = 1, comparison = "GreaterThanOrEqualToThreshold", evaluation = 1, datapoints = 1, missing = "notBreaching", what = "DynamoDB failed to copy ${var.table_name} changes to ${var.source_stream_name}" }
    "${var.source_stream_name}-iterator-age"       = { namespace = "AWS/Kinesis", metric = "GetRecords.IteratorAgeMilliseconds", dims = { StreamName = var.source_stream_name }, stat = "Maximum", period = 60, threshold = 60000, comparison = "GreaterThanOrEqualToThreshold", evaluation = 5, datapoints = 3, missing = "notBreaching", what = "Readers of ${var.source_stream_name} are more than 60 s behind" }
  }
  # Prefixed names; the Kinesis alarms carry the (already prefixed) table and stream names.
  alarms = merge(
    { for k, a in merge(local.function_alarms, local.counter_alarms) : "${var.prefix}${k}" => a },
    local.kinesis_alarms,
  )
}

resource "aws_cloudwatch_metric_alarm" "this" {
  for_each            = local.alarms
  alarm_name          = each.key
  alarm_description   = "${each.value.what}. Runbook: README \"Alarms\"."
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dims
  statistic           = each.value.stat
  period              = each.value.period
  comparison_operator = each.value.comparison
  evaluation_periods  = each.value.evaluation
  datapoints_to_alarm = each.value.datapoints
  threshold           = each.value.threshold
  treat_missing_data  = each.value.missing
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

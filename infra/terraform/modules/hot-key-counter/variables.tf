variable "prefix" {
  description = "Prefix of every name the block creates: <prefix>counters, <prefix>likes-aggregator, <prefix>count-rebuilder, <prefix>stream-failures, <prefix>count-rebuilder-schedule and the alarms (the functions' HEATSINK_PREFIX)."
  type        = string
}

variable "table_name" {
  description = "The table whose items are counted (insert-only events, e.g. orders)."
  type        = string
}

variable "table_arn" {
  description = "Its ARN. The repair recounts one time bucket of one value through the table's write-sharded GSI by-<count_by> (partition key <count_by>_shard = <value>#<n>, n in 0..16; sort key time_attribute, Unix ms): the table must have it and its writers must set both attributes."
  type        = string
}

variable "count_by" {
  description = "The String attribute whose value is counted (customer: one counter per customer)."
  type        = string
}

variable "counter" {
  description = "The counter's name: items are <counter>#<value> in the counters table. Default: count_by."
  type        = string
  default     = null
}

variable "time_attribute" {
  description = "The Number attribute holding the Unix milliseconds at which an item became durable."
  type        = string
}

variable "source_kind" {
  description = "Where the aggregator reads the table's changes, exactly one: kinesis (the table's Kinesis streaming destination) or dynamodb-streams (the table's own stream). Both carry every change: reading both would count it twice."
  type        = string

  validation {
    condition     = contains(["kinesis", "dynamodb-streams"], var.source_kind)
    error_message = "source_kind must be kinesis or dynamodb-streams."
  }
}

variable "source_arn" {
  description = "The Kinesis stream's ARN (kinesis) or the table's stream ARN (dynamodb-streams)."
  type        = string
}

variable "source_stream_name" {
  description = "The Kinesis stream's name (kinesis only: its write-throttle and iterator-age alarms)."
  type        = string
  default     = ""
}

variable "batch_size" {
  description = "Records per batch (Lambda BatchSize)."
  type        = number
  default     = 1000
}

variable "window_seconds" {
  description = "Lambda MaximumBatchingWindowInSeconds: how long changes gather before a flush."
  type        = number
  default     = 3
}

variable "retry_attempts" {
  description = "Retries of a failing batch before its pointer is parked in <prefix>stream-failures."
  type        = number
  default     = 10
}

variable "max_record_age_seconds" {
  description = "A batch older than this is parked instead of retried."
  type        = number
  default     = 21600
}

variable "concurrency" {
  description = "Reserved concurrency: aggregator (one batch per shard plus a reshard's parents and children) and rebuilder (1: never concurrent with itself)."
  type        = object({ aggregator = number, rebuilder = number })
  default     = { aggregator = 20, rebuilder = 1 }
}

variable "parked_age_alarm_seconds" {
  description = "Alarm when the oldest parked batch pointer is this old: its records leave the source's retention soon after (default: half of a 24-hour source)."
  type        = number
  default     = 43200
}

variable "compact_grace_seconds" {
  description = "Closed shards' sub-keys are folded and their tombstones deleted this long after the source's retention ends (24 h for DynamoDB Streams and a 24-hour Kinesis stream)."
  type        = number
  default     = 86400
}

variable "alarm_topic_arn" {
  description = "Every alarm of the block notifies this topic on ALARM and OK (modules/alarm-topic)."
  type        = string
}

variable "async_failures_queue" {
  description = "Where failed rebuilder invocations and undeliverable schedule events are parked ({ arn, name, key_arn }); null: a queue of the block's own, <prefix>count-rebuilder-failures. A shared queue's policy must let EventBridge send for this block's schedule rule (output event_rule_arns)."
  type        = object({ arn = string, name = string, key_arn = string })
  default     = null
}

variable "lambda_dir" {
  description = "Directory holding <function>/bootstrap.zip (make lambdas)."
  type        = string
}

variable "architecture" {
  description = "Lambda architecture: arm64 or x86_64."
  type        = string
  default     = "arm64"
}

variable "log_retention_days" {
  description = "Retention of the functions' log groups."
  type        = number
  default     = 30
}

variable "environment" {
  description = "Extra environment variables of both functions (e.g. the capacity log's settings)."
  type        = map(string)
  default     = {}
}

variable "tags" {
  type    = map(string)
  default = {}
}

variable "tracing" {
  description = "X-Ray tracing of the functions: PassThrough (a trace only when the caller sampled one; free on the hot paths) or Active (1 request/s plus 5 % per function: about 500 traces/s at 10,000 likes/s, roughly $6,500 a month)."
  type        = string
  default     = "PassThrough"
}

variable "prefix" {
  description = "Prefix of every table, stream, function, rule and alarm name (the functions' HEATSINK_PREFIX)."
  type        = string
  default     = "heatsink-"
}

variable "architecture" {
  description = "Lambda architecture: arm64 or x86_64."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["arm64", "x86_64"], var.architecture)
    error_message = "architecture must be arm64 or x86_64."
  }
}

variable "like_events_source" {
  # Must equal infra/esm.json's `source` (a variable's default cannot read a file; the contract
  # tests compare them).
  description = "likes-aggregator's one event source for the liked table's changes: kinesis (Kinesis Data Streams for DynamoDB: like-events, fed by the table's Kinesis streaming destination) or dynamodb-streams (the table's own stream). Never both: each carries every change, so both would count every like twice."
  type        = string
  default     = "kinesis"

  validation {
    condition     = contains(["kinesis", "dynamodb-streams"], var.like_events_source)
    error_message = "like_events_source must be kinesis or dynamodb-streams."
  }
}

variable "lambda_dir" {
  description = "Directory holding <function>/bootstrap.zip (make lambdas: target/lambda for arm64, target/lambda-x86_64 for x86_64)."
  type        = string
}

variable "hot_partition_fraction" {
  description = "Hot-partition alarms fire at this fraction of the per-partition (or per-shard) ceiling."
  type        = number
  default     = 0.8
}

variable "log_retention_days" {
  description = "Retention of the functions' and the API's log groups."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = { project = "heatsink" }
}

variable "jwt_issuer" {
  description = "OpenID Connect issuer (iss) whose JWTs the likes API accepts. Empty: the module creates a Cognito user pool and accepts its tokens."
  type        = string
  default     = ""
}

variable "jwt_audience" {
  description = "Accepted aud values with jwt_issuer (ignored with the module's own user pool)."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.jwt_audience) <= 50
    error_message = "jwt_audience takes at most 50 audiences."
  }
}

variable "concurrency" {
  description = "Reserved concurrency per function: a cap on likes-api, a reserve for likes-aggregator, 1 for the singletons."
  type        = map(number)
  default = {
    "likes-api"         = 50
    "likes-aggregator"  = 20
    "count-rebuilder"   = 1
    "hotkey-controller" = 1
    "autopilot"         = 1
  }
}

variable "controller_tables" {
  description = "Tables hotkey-controller watches (logical names) and what their hot keys need (read or write); its grants follow."
  type        = map(string)
  default     = { counters = "read" }
}

variable "contributor_insights_mode" {
  description = "DynamoDB Contributor Insights mode of every table and GSI (ACCESSED_AND_THROTTLED_KEYS or THROTTLED_KEYS); null: each table's default in modules/hot-key-guard."
  type        = string
  default     = null
}

variable "tracing" {
  description = "X-Ray tracing of the functions: PassThrough (a trace only when the caller sampled one; free on the hot paths) or Active (1 request/s plus 5 % per function: about 500 traces/s at 10,000 likes/s, roughly $6,500 a month)."
  type        = string
  default     = "PassThrough"
}

variable "autopilot_act" {
  description = "The autopilot's act switch (HEATSINK_AUTOPILOT_ACT): true splits and merges like-events' shards within its budgets (and only then may its role: kinesis:SplitShard, kinesis:MergeShards); false, the default, is a dry run: the loop only reports what it would do. The kill switch either way: heatsink autopilot pause --stream <prefix>like-events --reason ..."
  type        = bool
  default     = false
}

variable "access_log_source_ip" {
  description = "Keep each request's source IP in the API access log ($context.identity.sourceIp), for finding a flood's origin; an IP is personal data, kept as long as the log (log_retention_days)."
  type        = bool
  default     = false
}

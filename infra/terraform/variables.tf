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

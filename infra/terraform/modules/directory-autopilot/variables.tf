variable "prefix" {
  description = "Prefix of every name the block creates: <prefix>directory-autopilot (function, role, log group), <prefix>directory-autopilot-schedule, <prefix>directory-autopilot-failures and the alarms (the function's HEATSINK_PREFIX)."
  type        = string
}

variable "directory_table_name" {
  description = "The slot directory the loop governs (HEATSINK_DIRECTORY_TABLE); its state and kill switch live in it too."
  type        = string
}

variable "directory_table_arn" {
  description = "The directory's ARN."
  type        = string
}

variable "owner_tables" {
  description = "Every owner table the directory names and every spare the loop may move to ({ name, arn, stream_arn }), each with a DynamoDB stream (a move catches up on the source's changes from it)."
  type        = list(object({ name = string, arn = string, stream_arn = string }))

  validation {
    condition     = length(var.owner_tables) > 0 && alltrue([for t in var.owner_tables : t.stream_arn != null && t.stream_arn != ""])
    error_message = "owner_tables must list at least one table, each with a stream (stream_enabled = true)."
  }
}

variable "spare_table_names" {
  description = "Names of the spare tables among owner_tables: empty owners a move may fill (HEATSINK_AUTOPILOT_SPARE, comma-separated; unset when empty)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.spare_table_names : s != "" && !strcontains(s, ",")])
    error_message = "A spare table name must be non-empty and have no comma."
  }
}

variable "act" {
  description = "Act on the decisions (move slot ranges); false: a dry run that only reports them, whose role cannot write the directory's entries or any owner table."
  type        = bool
  default     = false
}

variable "schedule_minutes" {
  description = "How often a period runs (an EventBridge rate, in minutes)."
  type        = number
  default     = 5

  validation {
    condition     = var.schedule_minutes >= 1 && floor(var.schedule_minutes) == var.schedule_minutes
    error_message = "schedule_minutes must be a whole number >= 1."
  }
}

variable "cloudwatch_minutes" {
  description = "The window of the owners' CloudWatch load each period reads (HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES)."
  type        = number
  default     = 5

  validation {
    condition     = var.cloudwatch_minutes >= 1 && floor(var.cloudwatch_minutes) == var.cloudwatch_minutes
    error_message = "cloudwatch_minutes must be a whole number >= 1."
  }
}

variable "governor" {
  description = "The governor's knobs; each null one keeps the function's default (its variable is not set): sustain (HEATSINK_AUTOPILOT_SUSTAIN), cooldown_minutes (HEATSINK_AUTOPILOT_COOLDOWN_MINUTES), per_hour (HEATSINK_AUTOPILOT_PER_HOUR), per_day (HEATSINK_AUTOPILOT_PER_DAY), owners_per_operation (HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION), band (HEATSINK_AUTOPILOT_BAND: hysteresis as a share of the mean owner load, default 0.1)."
  type = object({
    sustain              = optional(number)
    cooldown_minutes     = optional(number)
    per_hour             = optional(number)
    per_day              = optional(number)
    owners_per_operation = optional(number)
    band                 = optional(number)
  })
  default = {}
}

variable "concurrency" {
  description = "Reserved concurrency: one period at a time."
  type        = number
  default     = 1
}

variable "alarm_topic_arn" {
  description = "Every alarm of the block notifies this topic on ALARM and OK (modules/alarm-topic)."
  type        = string
}

variable "async_failures_queue" {
  description = "Where failed invocations and undeliverable schedule events are parked ({ arn, name, key_arn }); null: a queue of the block's own, <prefix>directory-autopilot-failures. A shared queue's policy must let EventBridge send for this block's schedule rule (output event_rule_arns)."
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
  description = "Retention of the function's log group."
  type        = number
  default     = 30
}

variable "environment" {
  description = "Extra environment variables of the function (e.g. the capacity log's settings)."
  type        = map(string)
  default     = {}
}

variable "tags" {
  type    = map(string)
  default = {}
}

variable "tracing" {
  description = "X-Ray tracing of the function: PassThrough (a trace only when the caller sampled one) or Active."
  type        = string
  default     = "PassThrough"
}

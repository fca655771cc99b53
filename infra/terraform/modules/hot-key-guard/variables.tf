variable "prefix" {
  description = "Prefix of every name the block creates: <prefix>hotkeys (the directory), <prefix>hotkey-controller, <prefix>control (the bus), <prefix>sampler-publisher, the rules (the controller's HEATSINK_PREFIX)."
  type        = string
}

variable "tables" {
  description = <<-EOT
    The tables to watch, by a key of your choice: name and ARN, the GSIs to watch (each gets
    Contributor Insights, alarms and insight rules), hot = read|write when the controller acts on
    the table's hot keys (HEATSINK_CONTROLLER_TABLES; unset: watched and alarmed only), and the
    Contributor Insights mode (ACCESSED_AND_THROTTLED_KEYS where the controller acts,
    THROTTLED_KEYS elsewhere by default; "" leaves the table alone).
  EOT
  type = map(object({
    name                 = string
    arn                  = string
    indexes              = optional(list(string), [])
    hot                  = optional(string)
    contributor_insights = optional(string)
  }))

  validation {
    condition     = alltrue([for t in values(var.tables) : t.hot == null || contains(["read", "write"], coalesce(t.hot, "read"))])
    error_message = "hot must be read or write."
  }
}

variable "directory_contributor_insights" {
  description = "Contributor Insights mode of the directory (<prefix>hotkeys, watched like the tables: every writer reads it); \"\" to leave it off."
  type        = string
  default     = "THROTTLED_KEYS"
}

variable "capacity_log_group_names" {
  description = "Log groups carrying heatsink's capacity log (heatsink::metrics::capacity): a per-partition insight rule over them (and the controller's own) for every watched table and index, and an alarm when one key nears the partition ceiling. Empty: throttle alarms and DynamoDB's own rules only."
  type        = list(string)
  default     = []
}

variable "hot_partition_fraction" {
  description = "Hot-partition alarms fire at this fraction of the 1,000 WCU/s or 3,000 RCU/s ceiling."
  type        = number
  default     = 0.8
}

variable "alarm_topic_arn" {
  description = "Every alarm of the block notifies this topic on ALARM and OK (modules/alarm-topic)."
  type        = string
}

variable "async_failures_queue" {
  description = "Where failed controller invocations and undeliverable events are parked ({ arn, name, key_arn }); null: a queue of the block's own, <prefix>hotkey-controller-failures. A shared queue's policy must let EventBridge send for this block's rules (output event_rule_arns)."
  type        = object({ arn = string, name = string, key_arn = string })
  default     = null
}

variable "concurrency" {
  description = "Reserved concurrency of the controller (1: never concurrent with itself)."
  type        = number
  default     = 1
}

variable "lambda_dir" {
  description = "Directory holding <function>/bootstrap.zip (make lambdas)."
  type        = string
}

variable "architecture" {
  type    = string
  default = "arm64"
}

variable "log_retention_days" {
  type    = number
  default = 30
}

variable "environment" {
  description = "Extra environment variables of the controller."
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

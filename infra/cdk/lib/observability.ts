/**
 * The contract between the functions' structured logs / EMF metrics and the alarms and dashboard.
 *
 * DynamoDB's own Contributor Insights rules are named with a creation timestamp
 * (`DynamoDBContributorInsights-PKC-<table>-<epoch-ms>`), so nothing can alarm on them by name at
 * synth time. heatsink therefore also defines its own CloudWatch Contributor Insights rules over
 * the functions' JSON log lines: every DynamoDB data-plane call logs one line carrying the fields
 * below, and every Kinesis put logs `stream` + `partition_key`. The paths follow
 * `tracing_subscriber::fmt().json()`, which nests an event's fields under `fields`
 * (`tracing::info!(table, partition_key, consumed_wcu, ...)`).
 */

/** JSON paths (below `$.`) of the log fields the insight rules read. */
export const LOG_FIELDS = {
  /** Full table name, e.g. `heatsink-counters`. */
  table: 'fields.table',
  /** GSI name for index operations; absent on base-table operations. */
  index: 'fields.index',
  /** The partition key value the call touched (salted key included, e.g. `post#p9#3`). */
  partitionKey: 'fields.partition_key',
  /** `ConsumedCapacity.WriteCapacityUnits` of the call (ReturnConsumedCapacity=INDEXES/TOTAL). */
  consumedWcu: 'fields.consumed_wcu',
  /** `ConsumedCapacity.ReadCapacityUnits` of the call. */
  consumedRcu: 'fields.consumed_rcu',
  /** Full Kinesis stream name, on PutRecord(s) log lines. */
  stream: 'fields.stream',
} as const;

/** CloudWatch namespace of the functions' Embedded Metric Format metrics. */
export const EMF_NAMESPACE = 'heatsink';

/** EMF metric names (dimension `Function` = the function's short name). */
export const EMF_METRICS = {
  /** Like events applied to in-memory aggregates but not yet flushed to `counters`. */
  counterLag: 'CounterLagEvents',
  /** Seconds between a like's creation and its flush into `counters`. */
  counterFlushDelay: 'CounterFlushDelaySeconds',
  /** Shard leases held / expired / stolen by this worker (`leases` table). */
  leasesHeld: 'LeasesHeld',
  leasesExpired: 'LeasesExpired',
  /** Keys currently marked hot in the hot-key directory, and keys sampled hot by clients. */
  hotKeys: 'HotKeys',
  sampledHotKeys: 'SampledHotKeys',
  /** Requests refused with 429 by the admission guard. */
  admissionRejected: 'AdmissionRejected',
} as const;

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

/**
 * Values of the EMF `Function` dimension that are not Lambda functions (those use their short
 * name, `FUNCTION_NAMES` in `schema.ts`): long-running processes embedding heatsink.
 */
export const EMF_PROCESSES = {
  /** A stream consumer (`heatsink::stream::Worker`): `heatsink tail --emf`, or a service calling `Worker::emit_emf`. */
  streamConsumer: 'stream-consumer',
} as const;
export type EmfProcess = (typeof EMF_PROCESSES)[keyof typeof EMF_PROCESSES];

/**
 * EMF metric names (dimension `Function` = the emitter's short name). Every one is emitted by
 * exactly one emitter (`Metric::emitter` in `heatsink::metrics`), named on each line.
 */
export const EMF_METRICS = {
  /** likes-aggregator: like events applied to in-memory aggregates but not yet flushed to `counters`. */
  counterLag: 'CounterLagEvents',
  /** likes-aggregator: seconds between a like's creation and its flush into `counters`. */
  counterFlushDelay: 'CounterFlushDelaySeconds',
  /** stream-consumer: leases one worker holds after a lease round (a gauge). */
  leasesHeld: 'LeasesHeld',
  /** stream-consumer: leases a worker took over because their holder let them expire. */
  leasesExpired: 'LeasesExpired',
  /** hotkey-controller: keys currently marked hot in the hot-key directory. */
  hotKeys: 'HotKeys',
  /** likes-api: requests refused with 429 by the admission guard. */
  admissionRejected: 'AdmissionRejected',
  /** count-rebuilder: likes the counters were off by, summed over the posts one run corrected (|change| each). */
  counterCorrection: 'CounterCorrectionLikes',
  /** count-rebuilder: posts whose counter one run corrected. */
  countersCorrected: 'CountersCorrected',
  /** count-rebuilder: posts one run left for a later one (liked within the quiet period, or moving). */
  countersUnsettled: 'CountersUnsettled',
  /** count-rebuilder: 1 when a run finished its pass, 0 when it stopped on its budget or found the lease held; a timed-out run emits nothing (the heartbeat). */
  rebuildCompleted: 'CounterRebuildCompleted',
  /** count-rebuilder: bucket checks one run left because the aggregator had not proven its progress past them, 0s included. */
  rebuildLagging: 'CounterRebuildLagging',
  /** count-rebuilder: 1 when a run judged nothing because proven progress is blocked (a silent shard, replication lag, nothing proven), else 0; a blocked run still feeds the heartbeat. */
  repairBlocked: 'CounterRepairBlocked',
  /** count-rebuilder: seconds from the aggregator's proven progress to the run's clock; not emitted while nothing is proven. */
  repairLag: 'CounterRepairLag',
  /** likes-aggregator: change identities the dedupe window's size guard shed in one batch; emitted only when above 0. */
  dedupeShed: 'CounterDedupeShed',
  /** likes-aggregator: changes counted although older than the dedupe window (possible double counts the repair corrects), per batch, 0s included. */
  lateChanges: 'CounterLateChanges',
  /** likes-aggregator: duplicate changes dropped by the dedupe window, per batch, 0s included. */
  duplicatesDropped: 'CounterDuplicatesDropped',
  /** likes-aggregator: records skipped as not a change of the aggregator's table, per batch, 0s included. */
  foreignRecords: 'CounterForeignRecords',
  /** autopilot: 1 per finished period (every minute), the heartbeat; a failed or timed-out period emits nothing. */
  autopilotPeriodCompleted: 'AutopilotPeriodCompleted',
  /** autopilot: split or merge operations started in one period (0 in a dry run). */
  autopilotOperationsStarted: 'AutopilotOperationsStarted',
  /** autopilot: 1 while the kill switch is set (`heatsink autopilot pause`), else 0 (a gauge). */
  autopilotPaused: 'AutopilotPaused',
  /** autopilot: 1 while an operation is in flight whose end the shard map does not prove although the stream is ACTIVE (an operator must look), else 0. */
  autopilotUnproven: 'AutopilotUnproven',
  /** autopilot: proposals waiting on the hourly or daily operation budget in one period. */
  autopilotOutOfBudget: 'AutopilotOutOfBudget',
  /** autopilot: split and merge proposals in one period (acted on or, in a dry run, only reported). */
  autopilotProposals: 'AutopilotProposals',
} as const;

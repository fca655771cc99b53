/**
 * heatsink's infrastructure blocks: compose them in your own CDK app to protect your own tables.
 *
 * - {@link HotKeyCounter}: pre-aggregated counters over one of your tables, fed by its stream or
 *   its Kinesis streaming destination, repaired on proof, with alarms and dashboard widgets.
 * - {@link HotKeyGuard}: the hot-key directory and controller, Contributor Insights on your tables
 *   and GSIs, alarms that tell a hot key from a short table, and the control bus routers report to.
 * - {@link StreamLeases}: a lease table for stream consumers, with `grantConsumer`.
 * - {@link AlarmTopic}: an encrypted SNS topic CloudWatch alarms can publish to.
 * - {@link DirectoryAutopilot}: the slot directory's control loop over your directory and its
 *   owner tables, moving slot ranges off a hot owner (a dry run unless `act`).
 *
 * `infra/cdk/examples/orders.ts` protects a user's `orders` table with these blocks and
 * `infra/cdk/examples/places.ts` puts the directory autopilot over a `places` slot directory; the
 * photo app's stack (`HeatsinkStack`) is built from them too.
 */
export { AlarmTopic } from './blocks/alarm-topic';
export type { AlarmTopicProps } from './blocks/alarm-topic';
export { HeatsinkFunction } from './blocks/common';
export type { CodeSource, FunctionDefaults, HeatsinkBinary, TracingMode } from './blocks/common';
export { DIRECTORY_AUTOPILOT_GRANTS, DIRECTORY_AUTOPILOT_TIMEOUT, DirectoryAutopilot } from './blocks/directory-autopilot';
export type { DirectoryAutopilotGovernor, DirectoryAutopilotProps } from './blocks/directory-autopilot';
export { HotKeyCounter } from './blocks/hot-key-counter';
export type { CounterBatching, CounterSource, HotKeyCounterProps } from './blocks/hot-key-counter';
export { HotKeyGuard, SAMPLER_DETAIL_TYPE, SAMPLER_SOURCE } from './blocks/hot-key-guard';
export type { ContributorInsightsMode, GuardedTable, HotKeyGuardProps } from './blocks/hot-key-guard';
export { KINESIS_CONSUMER_ACTIONS, LEASE_TABLE_ACTIONS, StreamLeases } from './blocks/stream-leases';
export type { StreamLeasesProps } from './blocks/stream-leases';

/**
 * The autopilot: the photo app's control loop over its like-events Kinesis stream.
 *
 * `autopilot` runs every minute (EventBridge, asynchronous, no retries: the next period is the
 * retry). Each period it samples the load of every open shard of `<prefix>like-events` (the
 * function derives the name from `HEATSINK_PREFIX`) and decides, with hysteresis, cooldowns, an
 * hourly and daily operation budget and a kill switch, whether a shard should be split or two
 * merged. Its state and the kill switch are one item per stream in `<prefix>autopilot`.
 *
 * Dry run by default (`act: false`): the loop only reports what it would do (logs and EMF
 * metrics), and its role cannot reshard: kinesis:SplitShard and kinesis:MergeShards are granted
 * only with `act: true` (`HEATSINK_AUTOPILOT_ACT=true`), as infra/grants.json's `act` entries say.
 * The kill switch is `heatsink autopilot pause --stream <prefix>like-events --reason ...`,
 * honoured within one period; `heatsink autopilot status --stream ...` shows the state.
 */
import {
  Duration,
  RemovalPolicy,
  aws_cloudwatch as cw,
  aws_dynamodb as dynamodb,
  aws_events as events,
  aws_kinesis as kinesis,
  aws_sns as sns,
  aws_sqs as sqs,
} from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { AlarmFactory, FunctionDefaults, HeatsinkFunction, QueueDestination, emfMetric } from './blocks/common';
import { eventTarget, functionAlarms, toolkitTable } from './blocks/hot-key-counter';
import { EMF_METRICS } from './observability';
import { TABLES, TableSpec } from './schema';

/**
 * The autopilot's calls (infra/grants.json `calls.autopilot`; test/grants.test.ts compares them):
 * its state item, the stream's shard map and per-shard samples, and, with the act switch only, the
 * reshards. A change to the calls is a change to one of these lines.
 */
export const AUTOPILOT_STATE_ACTIONS = ['dynamodb:GetItem', 'dynamodb:UpdateItem'];
export const AUTOPILOT_STREAM_ACTIONS = ['kinesis:ListShards', 'kinesis:DescribeStreamSummary', 'kinesis:GetShardIterator', 'kinesis:GetRecords'];
/** Granted only when the act switch is on (grants.json entries with `"act": true`). */
export const AUTOPILOT_ACT_ACTIONS = ['kinesis:SplitShard', 'kinesis:MergeShards'];

export interface AutopilotProps extends FunctionDefaults {
  /** The functions' `HEATSINK_PREFIX`: the table is `<prefix>autopilot`, the governed stream `<prefix>like-events`. */
  readonly prefix: string;
  /** The governed stream, `<prefix>like-events`. */
  readonly stream: kinesis.IStream;
  /** Act on the decisions (split and merge); otherwise a dry run that only reports them. @default false */
  readonly act?: boolean;
  /** Where failed invocations and undeliverable schedule events are parked. */
  readonly asyncFailures: sqs.IQueue;
  /** Every alarm notifies this topic on ALARM and OK. */
  readonly alarmTopic?: sns.ITopic;
  /** Reserved concurrency: one period at a time. @default 1 */
  readonly concurrency?: number;
  /** @default RETAIN */
  readonly removalPolicy?: RemovalPolicy;
}

export class Autopilot extends Construct {
  /** `<prefix>autopilot`: the state and kill switch. */
  public readonly table: dynamodb.TableV2;
  public readonly fn: HeatsinkFunction;
  public readonly alarms: cw.Alarm[];
  /** Dashboard widgets, one row per entry. */
  public readonly widgets: cw.IWidget[][] = [];

  constructor(scope: Construct, id: string, props: AutopilotProps) {
    super(scope, id);
    const prefix = props.prefix;
    const act = props.act ?? false;
    const concurrency = props.concurrency ?? 1;
    const spec = TABLES.find((t) => t.logical === 'autopilot') as TableSpec;
    this.table = toolkitTable(this, 'Table', `${prefix}autopilot`, spec, props.removalPolicy);

    this.fn = new HeatsinkFunction(this, 'Function', {
      ...props,
      functionName: `${prefix}autopilot`,
      binary: 'autopilot',
      description: `like-events control loop: per-shard load -> split/merge (${act ? 'acting' : 'dry run'})`,
      memory: 256,
      timeout: Duration.seconds(60),
      reservedConcurrency: concurrency,
      variables: {
        HEATSINK_PREFIX: prefix,
        RUST_LOG: 'info',
        HEATSINK_AUTOPILOT_ACT: act ? 'true' : 'false',
      },
    });
    // Scheduled: no async retries (the next period is the retry; concurrency 1 must not queue
    // duplicates), failures parked.
    this.fn.fn.configureAsyncInvoke({
      retryAttempts: 0,
      maxEventAge: Duration.minutes(1),
      onFailure: new QueueDestination(props.asyncFailures, this.fn),
    });
    new events.Rule(this, 'Schedule', {
      ruleName: `${prefix}autopilot-schedule`,
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [eventTarget(this.fn, props.asyncFailures)],
    });

    // ---- grants: exactly the autopilot's calls (infra/grants.json) ----
    this.fn.grant(AUTOPILOT_STATE_ACTIONS, [this.table.tableArn]);
    this.fn.grant(AUTOPILOT_STREAM_ACTIONS, [props.stream.streamArn]);
    if (act) this.fn.grant(AUTOPILOT_ACT_ACTIONS, [props.stream.streamArn]);

    // ---- alarms ----
    const f = new AlarmFactory(this, props.alarmTopic);
    this.alarms = f.alarms;
    functionAlarms(f, this.fn, 'autopilot', prefix, concurrency);
    const fiveMinutes = Duration.minutes(5);
    // The heartbeat: a finished period emits AutopilotPeriodCompleted (every minute); none in 15
    // minutes means the loop stopped running or stopped finishing.
    f.alarm('Failing', {
      alarmName: `${prefix}autopilot-failing`,
      alarmDescription:
        'autopilot finished no period (AutopilotPeriodCompleted) in 3 five-minute periods in a row: it stopped running or every period fails. Runbook: README "Alarms".',
      metric: emfMetric(EMF_METRICS.autopilotPeriodCompleted, 'autopilot', 'Sum', undefined, fiveMinutes),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: 3,
      datapointsToAlarm: 3,
      treatMissingData: cw.TreatMissingData.BREACHING,
    });
    const gauges: [string, string, string, string][] = [
      ['Paused', 'autopilot-paused', EMF_METRICS.autopilotPaused, 'autopilot is paused by its kill switch (AutopilotPaused) for 15 minutes: it reports, never acts'],
      [
        'OutOfBudget',
        'autopilot-out-of-budget',
        EMF_METRICS.autopilotOutOfBudget,
        'autopilot proposals waited on the hourly or daily operation budget (AutopilotOutOfBudget) for 15 minutes',
      ],
      [
        'Unproven',
        'autopilot-unproven',
        EMF_METRICS.autopilotUnproven,
        'an autopilot operation is in flight whose end the shard map does not prove while the stream is ACTIVE (AutopilotUnproven), for 15 minutes: an operator must look',
      ],
    ];
    for (const [id, name, metric, what] of gauges) {
      f.alarm(id, {
        alarmName: `${prefix}${name}`,
        alarmDescription: `${what}. Runbook: README "Alarms".`,
        metric: emfMetric(metric, 'autopilot', 'Maximum', undefined, fiveMinutes),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
    }

    // ---- dashboard ----
    // The loop's heartbeat, what it proposed and started, and the three states an operator must
    // see (paused, out of budget, an operation whose end the shard map does not prove); the same
    // widget as the local stack's (heatsink_photo_app::dashboard).
    this.widgets.push([
      new cw.GraphWidget({
        title: 'Autopilot (like-events): periods, proposals, operations, holds',
        left: [
          emfMetric(EMF_METRICS.autopilotPeriodCompleted, 'autopilot', 'Sum', 'periods completed'),
          emfMetric(EMF_METRICS.autopilotProposals, 'autopilot', 'Maximum', 'proposals'),
          emfMetric(EMF_METRICS.autopilotOperationsStarted, 'autopilot', 'Sum', 'splits and merges started'),
        ],
        right: [
          emfMetric(EMF_METRICS.autopilotPaused, 'autopilot', 'Maximum', 'paused'),
          emfMetric(EMF_METRICS.autopilotOutOfBudget, 'autopilot', 'Maximum', 'waiting on budget'),
          emfMetric(EMF_METRICS.autopilotUnproven, 'autopilot', 'Maximum', 'unproven in flight'),
        ],
        width: 8,
        height: 6,
      }),
    ]);
  }
}

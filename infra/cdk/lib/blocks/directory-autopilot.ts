/**
 * The slot directory's autopilot: a control loop over a team's slot directory.
 *
 * A slot directory (`heatsink::slots`) is a DynamoDB table mapping key-slot ranges to owner
 * tables. `directory-autopilot` runs on a schedule (every 5 minutes by default; EventBridge,
 * asynchronous, no retries: the next period is the retry). Each period it reads every owner
 * table's consumed write capacity from CloudWatch over the last `cloudwatchMinutes`, places it on
 * slots, and decides, with hysteresis (`sustain`), cooldowns, an hourly and daily operation budget
 * and a kill switch, whether to move slot ranges from a hotter owner table to a cooler one (or to
 * a spare). Its state and the kill switch live in the directory table itself.
 *
 * Dry run by default (`act: false`): the loop only reports what it would do (logs and EMF
 * metrics), and its role can neither write the directory's entries nor touch an owner table's
 * items or stream: those grants come only with `act: true` (`HEATSINK_AUTOPILOT_ACT=true`), as
 * infra/grants.json's `act` entries of `directory-autopilot` say. The kill switch is
 * `heatsink autopilot pause --prefix <prefix> --reason ...`, honoured within one period;
 * `heatsink autopilot status --prefix <prefix>` shows the state.
 */
import {
  Duration,
  aws_cloudwatch as cw,
  aws_dynamodb as dynamodb,
  aws_events as events,
  aws_sns as sns,
  aws_sqs as sqs,
} from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { EMF_METRICS } from '../observability';
import { AlarmFactory, FunctionDefaults, HeatsinkFunction, QueueDestination, emfMetric, literalName } from './common';
import { asyncFailureQueue, eventTarget, functionAlarms } from './hot-key-counter';

/**
 * The directory autopilot's grants, each list a call its code makes (infra/grants.json
 * `calls["directory-autopilot"]`; test/examples.test.ts compares them). A change to the calls is a
 * change to one of these lines.
 */
export const DIRECTORY_AUTOPILOT_GRANTS = {
  /** Always (a dry run too): the directory's map and move records, and the loop's state item in it. */
  directory: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:UpdateItem'],
  /** Always, on `"*"`: the owners' consumed capacity (CloudWatch has no resource-level permission for it). */
  anyResource: ['cloudwatch:GetMetricData'],
  /** Only with the act switch on (grants.json entries with `"act": true`): the mover's calls. */
  act: {
    /** On the directory: the move record, its lease and the range's mark (transaction items). */
    directory: ['dynamodb:PutItem', 'dynamodb:ConditionCheckItem'],
    /**
     * On every owner and spare table: the key schema and stream, the copy's scan and writes, the
     * fence and marker items, the purge, and the diff's re-read of a difference.
     */
    owners: ['dynamodb:DescribeTable', 'dynamodb:Scan', 'dynamodb:PutItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem', 'dynamodb:GetItem'],
    /** On every owner and spare table's stream: the changes a move catches up on. */
    streams: ['dynamodb:DescribeStream', 'dynamodb:GetShardIterator', 'dynamodb:GetRecords'],
  },
} as const;

/** The governor's knobs; each unset one keeps the function's default (its variable is not set). */
export interface DirectoryAutopilotGovernor {
  /** Periods in a row an owner must need relief before a move runs (`HEATSINK_AUTOPILOT_SUSTAIN`). */
  readonly sustain?: number;
  /** Minutes the slots an operation moved are left alone (no move back or on) (`HEATSINK_AUTOPILOT_COOLDOWN_MINUTES`). */
  readonly cooldownMinutes?: number;
  /** Operations started per hour at most (`HEATSINK_AUTOPILOT_PER_HOUR`). */
  readonly perHour?: number;
  /** Operations started per day at most (`HEATSINK_AUTOPILOT_PER_DAY`). */
  readonly perDay?: number;
  /** Hot owners one operation relieves, each with every piece its plan moves, moved one after another (`HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION`; the function's default 1). */
  readonly ownersPerOperation?: number;
  /**
   * Hysteresis as a share of the mean owner load (`HEATSINK_AUTOPILOT_BAND`; the function's
   * default 0.1): an owner is relieved above (1.1 + band) × the mean, destinations are filled to
   * (1.1 − band) × the mean. BENCHMARKS.md measures 0.05 against 0.1.
   */
  readonly band?: number;
}

export interface DirectoryAutopilotProps extends FunctionDefaults {
  /**
   * Prefix of every name the block creates: `<prefix>directory-autopilot` (function, role, log
   * group), `<prefix>directory-autopilot-schedule`, `<prefix>directory-autopilot-failures` and the
   * alarms. The function reads it as `HEATSINK_PREFIX`.
   */
  readonly prefix: string;
  /** The slot directory (`HEATSINK_DIRECTORY_TABLE`); the loop's state and kill switch live in it too. */
  readonly directory: dynamodb.ITable;
  /** The directory's name, when it was not created with a fixed one. */
  readonly directoryName?: string;
  /**
   * Every owner table the directory names and every spare the loop may move to, each with a
   * DynamoDB stream (a move reads the source's changes from it while it catches up).
   */
  readonly owners: dynamodb.ITable[];
  /** Names of the spare tables among `owners`: empty owners a move may fill (`HEATSINK_AUTOPILOT_SPARE`). @default none */
  readonly spare?: string[];
  /**
   * Act on the decisions (move slot ranges); otherwise a dry run that only reports them, whose
   * role cannot write the directory's entries or any owner table. @default false
   */
  readonly act?: boolean;
  /** How often a period runs (an EventBridge rate). @default 5 minutes */
  readonly schedule?: Duration;
  /** The window of the owners' CloudWatch load each period reads (`HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES`). @default 5 */
  readonly cloudwatchMinutes?: number;
  /** The governor's knobs (hysteresis, cooldown, budgets); unset ones keep the function's defaults. */
  readonly governor?: DirectoryAutopilotGovernor;
  /** Every alarm notifies this topic on ALARM and OK. */
  readonly alarmTopic?: sns.ITopic;
  /**
   * Where failed invocations and undeliverable schedule events are parked.
   * @default a queue of the block's own, `<prefix>directory-autopilot-failures`
   */
  readonly asyncFailures?: sqs.IQueue;
  /** Reserved concurrency: one period at a time. @default 1 */
  readonly concurrency?: number;
}

/** The function's Lambda timeout: a period may step a live move until just before it (the code cuts itself first). */
export const DIRECTORY_AUTOPILOT_TIMEOUT = Duration.seconds(900);

/**
 * The slot directory's autopilot: `directory-autopilot` on a schedule over your directory and its
 * owner tables, its failure queue, alarms (heartbeat, paused, out of budget, unproven, errors,
 * throttles) and a dashboard widget. A dry run unless `act`.
 *
 * Limits: the function's EMF metrics carry `Function=directory-autopilot` whatever the prefix, so
 * two directory autopilots in one account and region share those series (and their alarms see
 * both).
 */
export class DirectoryAutopilot extends Construct {
  public readonly fn: HeatsinkFunction;
  public readonly asyncFailures: sqs.IQueue;
  public readonly alarms: cw.Alarm[];
  /** Dashboard widgets, one row per entry. */
  public readonly widgets: cw.IWidget[][] = [];

  constructor(scope: Construct, id: string, props: DirectoryAutopilotProps) {
    super(scope, id);
    const prefix = props.prefix;
    const act = props.act ?? false;
    const concurrency = props.concurrency ?? 1;
    const schedule = props.schedule ?? Duration.minutes(5);
    const cloudwatchMinutes = props.cloudwatchMinutes ?? 5;
    const spare = props.spare ?? [];
    const directoryName = literalName(props.directory, props.directoryName, 'DirectoryAutopilot directory');
    if (props.owners.length === 0) throw new Error('DirectoryAutopilot: owners is empty (every owner and spare table)');
    const streams = props.owners.map((t) => {
      if (!t.tableStreamArn) throw new Error(`DirectoryAutopilot: owner ${t.node.path} has no stream (set dynamoStream on it)`);
      return t.tableStreamArn;
    });
    const ownerNames = props.owners.map((t) => {
      try {
        return literalName(t, undefined, 'owner');
      } catch {
        return undefined;
      }
    });
    if (ownerNames.every((n) => n !== undefined)) {
      const unknown = spare.filter((s) => !ownerNames.includes(s));
      if (unknown.length) throw new Error(`DirectoryAutopilot: spare ${unknown.join(', ')} is not among owners`);
    }
    if (spare.some((s) => s === '' || s.includes(','))) throw new Error('DirectoryAutopilot: a spare table name is empty or has a comma');
    if (!Number.isInteger(cloudwatchMinutes) || cloudwatchMinutes < 1) throw new Error('DirectoryAutopilot: cloudwatchMinutes must be a whole number >= 1');

    const governor = props.governor ?? {};
    const knobs: Record<string, number | undefined> = {
      HEATSINK_AUTOPILOT_SUSTAIN: governor.sustain,
      HEATSINK_AUTOPILOT_COOLDOWN_MINUTES: governor.cooldownMinutes,
      HEATSINK_AUTOPILOT_PER_HOUR: governor.perHour,
      HEATSINK_AUTOPILOT_PER_DAY: governor.perDay,
      HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION: governor.ownersPerOperation,
      HEATSINK_AUTOPILOT_BAND: governor.band,
    };
    const variables: Record<string, string> = {
      HEATSINK_PREFIX: prefix,
      RUST_LOG: 'info',
      HEATSINK_DIRECTORY_TABLE: directoryName,
      HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES: String(cloudwatchMinutes),
      HEATSINK_AUTOPILOT_ACT: act ? 'true' : 'false',
    };
    if (spare.length) variables.HEATSINK_AUTOPILOT_SPARE = spare.join(',');
    for (const [name, value] of Object.entries(knobs)) if (value !== undefined) variables[name] = String(value);

    this.asyncFailures = props.asyncFailures ?? asyncFailureQueue(this, `${prefix}directory-autopilot-failures`);
    this.fn = new HeatsinkFunction(this, 'Function', {
      ...props,
      functionName: `${prefix}directory-autopilot`,
      binary: 'directory-autopilot',
      description: `${directoryName} control loop: owner load -> slot moves (${act ? 'acting' : 'dry run'})`,
      memory: 512,
      timeout: DIRECTORY_AUTOPILOT_TIMEOUT,
      reservedConcurrency: concurrency,
      variables,
      starResourceActions: [...DIRECTORY_AUTOPILOT_GRANTS.anyResource],
    });
    // Scheduled: no async retries (the next period is the retry; concurrency 1 must not queue
    // duplicates: a tick older than one period is parked, not run late), failures parked.
    this.fn.fn.configureAsyncInvoke({
      retryAttempts: 0,
      maxEventAge: Duration.seconds(Math.min(Math.max(schedule.toSeconds(), 60), 6 * 3600)),
      onFailure: new QueueDestination(this.asyncFailures, this.fn),
    });
    new events.Rule(this, 'Schedule', {
      ruleName: `${prefix}directory-autopilot-schedule`,
      schedule: events.Schedule.rate(schedule),
      targets: [eventTarget(this.fn, this.asyncFailures)],
    });

    // ---- grants: exactly the directory autopilot's calls (infra/grants.json) ----
    const g = DIRECTORY_AUTOPILOT_GRANTS;
    const owners = props.owners.map((t) => t.tableArn);
    this.fn.grant([...g.directory], [props.directory.tableArn]);
    this.fn.grant([...g.anyResource], ['*']);
    if (act) {
      this.fn.grant([...g.act.directory], [props.directory.tableArn]);
      this.fn.grant([...g.act.owners], owners);
      this.fn.grant([...g.act.streams], streams);
    }

    // ---- alarms ----
    const f = new AlarmFactory(this, props.alarmTopic);
    this.alarms = f.alarms;
    functionAlarms(f, this.fn, 'directory-autopilot', prefix, concurrency);
    const fiveMinutes = Duration.minutes(5);
    const emitter = 'directory-autopilot';
    // The heartbeat: a finished period emits AutopilotPeriodCompleted. A period may run up to the
    // 15-minute timeout (stepping a live move) and the next tick waits for it, so silence is judged
    // over at least 20 minutes (and at least three schedule intervals).
    const heartbeatPeriods = Math.max(4, Math.ceil((3 * schedule.toMinutes()) / 5));
    f.alarm('Failing', {
      alarmName: `${prefix}directory-autopilot-failing`,
      alarmDescription: `directory-autopilot (${directoryName}) finished no period (AutopilotPeriodCompleted) in ${heartbeatPeriods} five-minute periods in a row: it stopped running or every period fails. Runbook: README "Alarms".`,
      metric: emfMetric(EMF_METRICS.autopilotPeriodCompleted, emitter, 'Sum', undefined, fiveMinutes),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: heartbeatPeriods,
      datapointsToAlarm: heartbeatPeriods,
      treatMissingData: cw.TreatMissingData.BREACHING,
    });
    const gauges: [string, string, string, string][] = [
      [
        'Paused',
        'directory-autopilot-paused',
        EMF_METRICS.autopilotPaused,
        `directory-autopilot (${directoryName}) is paused by its kill switch (AutopilotPaused) for 15 minutes: it reports, never acts`,
      ],
      [
        'OutOfBudget',
        'directory-autopilot-out-of-budget',
        EMF_METRICS.autopilotOutOfBudget,
        `directory-autopilot (${directoryName}) proposals waited on the hourly or daily operation budget (AutopilotOutOfBudget) for 15 minutes`,
      ],
      [
        'Unproven',
        'directory-autopilot-unproven',
        EMF_METRICS.autopilotUnproven,
        `a directory-autopilot (${directoryName}) move is in flight whose end the directory does not prove (AutopilotUnproven), for 15 minutes: an operator must look`,
      ],
    ];
    for (const [gid, name, metric, what] of gauges) {
      f.alarm(gid, {
        alarmName: `${prefix}${name}`,
        alarmDescription: `${what}. Runbook: README "Alarms".`,
        metric: emfMetric(metric, emitter, 'Maximum', undefined, fiveMinutes),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
    }

    // ---- dashboard ----
    this.widgets.push([
      new cw.GraphWidget({
        title: `Directory autopilot (${directoryName}): periods, proposals, moves, holds`,
        left: [
          emfMetric(EMF_METRICS.autopilotPeriodCompleted, emitter, 'Sum', 'periods completed', fiveMinutes),
          emfMetric(EMF_METRICS.autopilotProposals, emitter, 'Maximum', 'proposals', fiveMinutes),
          emfMetric(EMF_METRICS.autopilotOperationsStarted, emitter, 'Sum', 'moves started', fiveMinutes),
        ],
        right: [
          emfMetric(EMF_METRICS.autopilotPaused, emitter, 'Maximum', 'paused', fiveMinutes),
          emfMetric(EMF_METRICS.autopilotOutOfBudget, emitter, 'Maximum', 'waiting on budget', fiveMinutes),
          emfMetric(EMF_METRICS.autopilotUnproven, emitter, 'Maximum', 'unproven in flight', fiveMinutes),
        ],
        width: 8,
        height: 6,
      }),
    ]);
  }
}

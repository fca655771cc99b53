import {
  Duration,
  RemovalPolicy,
  Validations,
  aws_cloudwatch as cw,
  aws_dynamodb as dynamodb,
  aws_events as events,
  aws_iam as iam,
  aws_logs as logs,
  aws_sns as sns,
  aws_sqs as sqs,
} from 'aws-cdk-lib';
import { Construct, IConstruct } from 'constructs';
import { EMF_METRICS, LOG_FIELDS } from '../observability';
import { PARTITION_RCU_CEILING, PARTITION_WCU_CEILING, TABLES, TableSpec } from '../schema';
import {
  AlarmFactory,
  FunctionDefaults,
  HeatsinkFunction,
  QueueDestination,
  TopContributorsWidget,
  ddbMetric,
  emfMetric,
  insightRuleArn,
  literalName,
} from './common';
import { asyncFailureQueue, eventTarget, functionAlarms, heartbeat, toolkitTable } from './hot-key-counter';

/** `source` and `detail-type` of the sampler-report events routers publish (`heatsink::detect::SAMPLER_SOURCE`). */
export const SAMPLER_SOURCE = 'heatsink.sampler';
export const SAMPLER_DETAIL_TYPE = 'heatsink hot-key report';

/**
 * DynamoDB Contributor Insights mode. `THROTTLED_KEYS` bills throttled requests only (close to
 * nothing while all is well); `ACCESSED_AND_THROTTLED_KEYS` bills every item read or written
 * (about $0.02 per million), and names hot keys before they throttle.
 */
export type ContributorInsightsMode = 'ACCESSED_AND_THROTTLED_KEYS' | 'THROTTLED_KEYS';

/** A table the guard watches. */
export interface GuardedTable {
  /**
   * The table. Contributor Insights is set on it (a `TableV2` of this app); for a table the app
   * does not own, set `contributorInsights: false` and enable it yourself.
   */
  readonly table: dynamodb.ITableV2;
  /** The table's name, when it was not created with a fixed one (alarm and rule names are built from it). */
  readonly tableName?: string;
  /** Its global secondary indexes to watch (each gets Contributor Insights, alarms and insight rules). */
  readonly indexes?: string[];
  /**
   * What this table's hot keys need when the controller acts on them (`HEATSINK_CONTROLLER_TABLES`):
   * `read` (micro-cache the key) or `write` (salt it). Unset: watched and alarmed, not acted on.
   */
  readonly hot?: 'read' | 'write';
  /**
   * Contributor Insights mode of the table and each index, or `false` to leave it alone.
   * @default ACCESSED_AND_THROTTLED_KEYS where the controller acts (it reads the accessed-keys
   * rules to name a key before it throttles), THROTTLED_KEYS elsewhere
   */
  readonly contributorInsights?: ContributorInsightsMode | false;
  /** Per-index mode, overriding `contributorInsights` for that index. */
  readonly indexContributorInsights?: Record<string, ContributorInsightsMode>;
}

export interface HotKeyGuardProps extends FunctionDefaults {
  /**
   * Prefix of every name the block creates: `<prefix>hotkeys` (the directory),
   * `<prefix>hotkey-controller`, `<prefix>control` (the bus), `<prefix>sampler-publisher`, the
   * rules; the controller reads it as `HEATSINK_PREFIX`.
   */
  readonly prefix: string;
  /** The tables (and GSIs) to watch. */
  readonly tables: GuardedTable[];
  /**
   * Log groups carrying heatsink's capacity log (one JSON line per DynamoDB key a call touched,
   * `heatsink::metrics::capacity`): the guard builds a per-partition insight rule over them for
   * every watched table and index, and alarms when one key nears the partition ceiling.
   * @default none: throttle alarms and DynamoDB's own rules only
   */
  readonly capacityLogGroups?: logs.ILogGroup[];
  /**
   * Contributor Insights mode of the directory (`<prefix>hotkeys`, which the guard watches like
   * the tables: every writer reads it), or `false`. @default THROTTLED_KEYS
   */
  readonly directoryContributorInsights?: ContributorInsightsMode | false;
  /** Hot-partition alarms fire at this fraction of the 1,000 WCU/s or 3,000 RCU/s ceiling. @default 0.8 */
  readonly hotPartitionFraction?: number;
  /** Every alarm of the block notifies this topic on ALARM and OK (see `AlarmTopic`). */
  readonly alarmTopic?: sns.ITopic;
  /** @default a queue of the block's own, `<prefix>hotkey-controller-failures` */
  readonly asyncFailures?: sqs.IQueue;
  /** Reserved concurrency of the controller. @default 1 (never concurrent with itself) */
  readonly concurrency?: number;
  /** @default RETAIN */
  readonly removalPolicy?: RemovalPolicy;
}

interface InsightRuleRef {
  readonly name: string;
  readonly title: string;
  /** Per-second ceiling the rule's top contributor is compared with. */
  readonly ceiling: number;
}

/**
 * Hot-key detection driving mitigation, on your tables.
 *
 * Creates the hot-key directory (`<prefix>hotkeys`), `hotkey-controller` (every minute, on the
 * state changes of the guard's hot-key alarms, and on sampler reports) which names hot keys from
 * Contributor Insights and reports and writes them to the directory with hysteresis; Contributor
 * Insights on each watched table and GSI; per-partition insight rules over the capacity log;
 * alarms that tell a hot key (key-range throttles, a partition near its ceiling) from a table
 * short of capacity; the control bus (`<prefix>control`) that only the sampler publisher role
 * (`<prefix>sampler-publisher`, trusted by the account: an administrator grants `sts:AssumeRole`
 * to the routers' roles) may put on; dashboard widgets.
 */
export class HotKeyGuard extends Construct {
  public readonly directory: dynamodb.TableV2;
  public readonly controller: HeatsinkFunction;
  public readonly controlBus: events.EventBus;
  public readonly samplerPublisher: iam.Role;
  public readonly asyncFailures: sqs.IQueue;
  public readonly alarms: cw.Alarm[];
  /** Names of the alarms whose state changes wake the controller. */
  public readonly hotKeyAlarmNames: string[] = [];
  /** The per-partition insight rules over the capacity log. */
  public readonly capacityRules: InsightRuleRef[] = [];
  /** The EventBridge rule sampler reports reach the controller through. */
  public readonly samplerReportsRuleName: string;
  /** Dashboard widgets, one row per entry. */
  public readonly widgets: cw.IWidget[][] = [];

  constructor(scope: Construct, id: string, props: HotKeyGuardProps) {
    super(scope, id);
    const prefix = props.prefix;
    const fraction = props.hotPartitionFraction ?? 0.8;
    const spec = TABLES.find((t) => t.logical === 'hotkeys') as TableSpec;
    this.directory = toolkitTable(this, 'Directory', `${prefix}hotkeys`, spec, props.removalPolicy);
    this.asyncFailures = props.asyncFailures ?? asyncFailureQueue(this, `${prefix}hotkey-controller-failures`);

    const directory: GuardedTable = {
      table: this.directory,
      tableName: `${prefix}hotkeys`,
      contributorInsights: props.directoryContributorInsights ?? 'THROTTLED_KEYS',
    };
    const tables = [directory, ...props.tables].map((t) => ({ ...t, name: literalName(t.table, t.tableName, 'HotKeyGuard table') }));
    const watched = tables.filter((t) => t.hot);
    const concurrency = props.concurrency ?? 1;
    this.controller = new HeatsinkFunction(this, 'Controller', {
      ...props,
      functionName: `${prefix}hotkey-controller`,
      binary: 'hotkey-controller',
      description: 'Contributor Insights + alarms -> hot-key directory',
      memory: 256,
      timeout: Duration.seconds(60),
      reservedConcurrency: concurrency,
      variables: {
        HEATSINK_PREFIX: prefix,
        RUST_LOG: 'info',
        HEATSINK_CONTROLLER_TABLES: watched.map((t) => `${t.name}:${t.hot}`).join(','),
      },
    });
    this.controller.fn.configureAsyncInvoke({
      retryAttempts: 0,
      maxEventAge: Duration.minutes(1),
      onFailure: new QueueDestination(this.asyncFailures, this.controller),
    });

    // ---- Contributor Insights on every watched table and GSI ----
    for (const t of tables) {
      if (t.contributorInsights === false) continue;
      const mode: ContributorInsightsMode = t.contributorInsights ?? (t.hot ? 'ACCESSED_AND_THROTTLED_KEYS' : 'THROTTLED_KEYS');
      setContributorInsights(t.table, mode, (t.indexes ?? []).map((i) => [i, t.indexContributorInsights?.[i] ?? mode]));
    }

    // ---- grants: exactly the controller's calls (infra/grants.json) ----
    this.controller.grant(['dynamodb:Scan', 'dynamodb:PutItem', 'dynamodb:DeleteItem'], [this.directory.tableArn]);
    if (watched.length > 0) {
      // DescribeTable lists a table's GSIs ...
      this.controller.grant(['dynamodb:DescribeTable'], watched.map((t) => t.table.tableArn));
      // ... so every index's rules are read too.
      this.controller.grant(
        ['dynamodb:DescribeContributorInsights'],
        watched.flatMap((t) => [t.table.tableArn, ...(t.indexes ?? []).map((i) => `${t.table.tableArn}/index/${i}`)]),
      );
      // DynamoDB names its managed rules DynamoDBContributorInsights-{PKC,PKT,SKC,SKT}-<table>-<epoch ms>
      // (GSIs: <table>-<index>-<epoch ms>); the creation time is unknown at deploy time. The
      // controller reads the partition-key rules only (accessed and throttled keys).
      const managedRules = watched.flatMap((t) => ['PKC', 'PKT'].map((kind) => `DynamoDBContributorInsights-${kind}-${t.name}-*`));
      this.controller.grant(['cloudwatch:GetInsightRuleReport'], managedRules.map(insightRuleArn));
      for (const rule of managedRules) {
        Validations.of(this.controller.role).acknowledge({
          id: `AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:insight-rule/${rule}]`,
          reason:
            "DynamoDB's managed Contributor Insights rules end in a creation timestamp unknown at deploy time; the pattern names the rule kind and the watched table exactly, only the timestamp is a wildcard.",
        });
      }
    }

    // ---- control plane: a bus only the sampler publisher role may put on ----
    // Routers' client samplers (long-lived services embedding heatsink) put their hot-key reports
    // on this bus; they name keys within seconds, before Contributor Insights does. The default
    // bus is open to any principal with events:PutEvents, so the reports get a bus of their own
    // whose policy denies every other principal, and the rule listens there only.
    this.samplerPublisher = new iam.Role(this, 'SamplerPublisherRole', {
      roleName: `${prefix}sampler-publisher`,
      description: `Routers assume this role to publish heatsink sampler reports to ${prefix}control`,
      // Account administrators decide which routers' roles may assume it (sts:AssumeRole in their policies).
      assumedBy: new iam.AccountRootPrincipal(),
    });
    this.controlBus = new events.EventBus(this, 'ControlBus', { eventBusName: `${prefix}control` });
    this.controlBus.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'OnlyTheSamplerPublisher',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: ['events:PutEvents'],
        resources: [this.controlBus.eventBusArn],
        conditions: { ArnNotEquals: { 'aws:PrincipalArn': this.samplerPublisher.roleArn } },
      }),
    );
    this.samplerPublisher.addToPolicy(
      new iam.PolicyStatement({
        actions: ['events:PutEvents'],
        resources: [this.controlBus.eventBusArn],
        conditions: { StringEquals: { 'events:source': SAMPLER_SOURCE } },
      }),
    );
    this.samplerReportsRuleName = `${prefix}hotkey-controller-sampler-reports`;
    const target = eventTarget(this.controller, this.asyncFailures);
    new events.Rule(this, 'SamplerReports', {
      ruleName: this.samplerReportsRuleName,
      description: `heatsink sampler reports (${prefix}control bus) -> hotkey-controller`,
      eventBus: this.controlBus,
      eventPattern: { source: [SAMPLER_SOURCE], detailType: [SAMPLER_DETAIL_TYPE] },
      targets: [target],
    });
    new events.Rule(this, 'Schedule', {
      ruleName: `${prefix}hotkey-controller-schedule`,
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [target],
    });

    // ---- heatsink's own insight rules over the capacity log ----
    // The controller's own calls are capacity lines too (it reads and writes the directory).
    const logGroups = props.capacityLogGroups?.length ? [...props.capacityLogGroups, this.controller.logGroup] : [];
    const logGroupNames = logGroups.map((g) => literalName(g, undefined, 'HotKeyGuard capacity log group'));
    const addCapacityRule = (table: string, index: string | undefined, unit: 'wcu' | 'rcu', deps: IConstruct[]) => {
      const name = `${table}${index ? `-${index}` : ''}-partition-${unit}`;
      const filters: object[] = [{ Match: `$.${LOG_FIELDS.table}`, In: [table] }];
      filters.push(index ? { Match: `$.${LOG_FIELDS.index}`, In: [index] } : { Match: `$.${LOG_FIELDS.index}`, IsPresent: false });
      const rule = new cw.CfnInsightRule(this, `Insight-${name}`, {
        ruleName: name,
        ruleState: 'ENABLED',
        ruleBody: JSON.stringify({
          Schema: { Name: 'CloudWatchLogRule', Version: 1 },
          LogGroupNames: logGroupNames,
          LogFormat: 'JSON',
          Contribution: {
            Keys: [`$.${LOG_FIELDS.partitionKey}`],
            ValueOf: `$.${unit === 'wcu' ? LOG_FIELDS.consumedWcu : LOG_FIELDS.consumedRcu}`,
            Filters: filters,
          },
          AggregateOn: 'Sum',
        }),
      });
      deps.forEach((g) => rule.node.addDependency(g));
      this.capacityRules.push({
        name,
        title: `${table}${index ? `/${index}` : ''} ${unit.toUpperCase()}/s, hottest partition key`,
        ceiling: unit === 'wcu' ? PARTITION_WCU_CEILING : PARTITION_RCU_CEILING,
      });
    };
    const targetsOf: { table: string; index?: string }[] = tables.flatMap((t) => [
      { table: t.name },
      ...(t.indexes ?? []).map((index) => ({ table: t.name, index })),
    ]);
    if (logGroups.length > 0) {
      for (const target of targetsOf) {
        addCapacityRule(target.table, target.index, 'wcu', logGroups);
        addCapacityRule(target.table, target.index, 'rcu', logGroups);
      }
    }

    // ---- alarms ----
    const f = new AlarmFactory(this, props.alarmTopic);
    this.alarms = f.alarms;
    const perSecond = (rule: InsightRuleRef) =>
      new cw.MathExpression({
        expression: `INSIGHT_RULE_METRIC('${rule.name}', 'MaxContributorValue') / 60`,
        usingMetrics: {},
        period: Duration.minutes(1),
        label: rule.title,
      });
    // Alarms whose state changes wake the controller: hot partitions and key-range throttles.
    for (const rule of this.capacityRules) {
      this.hotKeyAlarmNames.push(`${rule.name}-hot`);
      f.alarm(`Hot-${rule.name}`, {
        alarmName: `${rule.name}-hot`,
        alarmDescription: `A single partition key of ${rule.title.split(' ')[0]} is above ${fraction * 100}% of the ${rule.ceiling}/s per-partition ceiling. Runbook: README "Alarms".`,
        metric: perSecond(rule),
        threshold: fraction * rule.ceiling,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 3,
        datapointsToAlarm: 2,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
    }
    const throttleReasons: Record<string, string[]> = {
      'key-range': ['ReadKeyRangeThroughputThrottleEvents', 'WriteKeyRangeThroughputThrottleEvents'],
      // Not a hot key: the table (provisioned), the account's per-table quota or the table's
      // on-demand maximum is short. Salting would not help; capacity or a limit would.
      capacity: [
        'ReadProvisionedThroughputThrottleEvents',
        'WriteProvisionedThroughputThrottleEvents',
        'ReadAccountLimitThrottleEvents',
        'WriteAccountLimitThrottleEvents',
        'ReadMaxOnDemandThroughputThrottleEvents',
        'WriteMaxOnDemandThroughputThrottleEvents',
      ],
    };
    for (const target of targetsOf) {
      const label = `${target.table}${target.index ? `-${target.index}` : ''}`;
      for (const [reason, metricNames] of Object.entries(throttleReasons)) {
        const usingMetrics: Record<string, cw.IMetric> = {};
        metricNames.forEach((m, i) => (usingMetrics[`m${i}`] = ddbMetric(m, target.table, target.index)));
        f.alarm(`Throttle-${label}-${reason}`, {
          alarmName: `${label}-throttled-${reason}`,
          alarmDescription:
            reason === 'key-range'
              ? `${label}: requests throttled because one partition exceeded its key-range ceiling (hot key). Runbook: README "Alarms".`
              : `${label}: requests throttled for capacity (provisioned throughput, the account's per-table quota or the table's on-demand maximum), not a hot key. Runbook: README "Alarms".`,
          metric: new cw.MathExpression({
            expression: Object.keys(usingMetrics).join(' + '),
            usingMetrics,
            period: Duration.minutes(1),
            label: `${label} throttles (${reason})`,
          }),
          threshold: 1,
          comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
          evaluationPeriods: 3,
          datapointsToAlarm: 2,
          treatMissingData: cw.TreatMissingData.NOT_BREACHING,
        });
        if (reason === 'key-range') this.hotKeyAlarmNames.push(`${label}-throttled-${reason}`);
      }
    }
    functionAlarms(f, this.controller, 'hotkey-controller', prefix, concurrency);
    heartbeat(f, prefix, 'hotkey-controller', EMF_METRICS.hotKeys, Duration.minutes(5), 'every minute');

    // Alarm state changes of exactly the hot-key alarms above wake the controller (names, not a
    // prefix: `heatsink-` would also match `heatsink-staging-`; names, not ARNs: an event pattern
    // holds at most 2,048 characters).
    if (this.hotKeyAlarmNames.length > 0) {
      new events.Rule(this, 'Alarms', {
        ruleName: `${prefix}hotkey-controller-alarms`,
        description: 'heatsink hot-key alarm state changes -> hotkey-controller',
        eventPattern: {
          source: ['aws.cloudwatch'],
          detailType: ['CloudWatch Alarm State Change'],
          detail: { alarmName: this.hotKeyAlarmNames },
        },
        targets: [target],
      });
    }

    // ---- dashboard ----
    this.widgets.push(
      this.capacityRules.map(
        (rule) =>
          new cw.GraphWidget({
            title: rule.title,
            left: [perSecond(rule)],
            leftAnnotations: [
              { value: rule.ceiling, label: 'per-partition ceiling', color: '#d62728' },
              { value: fraction * rule.ceiling, label: 'alarm', color: '#ff7f0e', fill: cw.Shading.NONE },
            ],
            leftYAxis: { min: 0 },
            width: 8,
            height: 6,
          }),
      ),
    );
    this.widgets.push(this.capacityRules.map((rule) => new TopContributorsWidget(rule.name, `Top contributors: ${rule.title}`)));
    this.widgets.push(
      targetsOf.map(
        (target) =>
          new cw.GraphWidget({
            title: `Throttles by reason: ${target.table}${target.index ? `/${target.index}` : ''}`,
            left: [...throttleReasons['key-range'], ...throttleReasons.capacity].map((m) => ddbMetric(m, target.table, target.index).with({ label: m.replace('ThrottleEvents', '') })),
            stacked: true,
            width: 8,
            height: 6,
          }),
      ),
    );
    // EventBridge's own count of the sampler reports the rule matched, i.e. what routers
    // delivered; no function emits a metric for them.
    this.widgets.push([
      new cw.GraphWidget({
        title: 'Hot keys: directory vs sampler reports delivered',
        left: [emfMetric(EMF_METRICS.hotKeys, 'hotkey-controller', 'Maximum', 'keys in the directory')],
        right: [
          new cw.Metric({
            namespace: 'AWS/Events',
            metricName: 'MatchedEvents',
            dimensionsMap: { RuleName: this.samplerReportsRuleName },
            statistic: 'Sum',
            label: 'sampler reports delivered',
            period: Duration.minutes(1),
          }),
        ],
        width: 8,
        height: 6,
      }),
    ]);
  }
}

/**
 * Contributor Insights on a `TableV2` of this app and on each of its `indexes` (the primary
 * replica's specification, `Replicas[0]`), each in its own mode.
 */
export function setContributorInsights(
  table: dynamodb.ITableV2,
  mode: ContributorInsightsMode,
  indexes: [string, ContributorInsightsMode][],
): void {
  if (!(table instanceof dynamodb.TableV2)) {
    throw new Error(
      `${table.node.path}: Contributor Insights can be set on a TableV2 of this app only; set contributorInsights: false and enable it on the table yourself`,
    );
  }
  const cfn = table.node.defaultChild as dynamodb.CfnGlobalTable;
  cfn.addPropertyOverride('Replicas.0.ContributorInsightsSpecification', { Enabled: true, Mode: mode });
  if (indexes.length > 0) {
    cfn.addPropertyOverride(
      'Replicas.0.GlobalSecondaryIndexes',
      indexes.map(([indexName, m]) => ({ IndexName: indexName, ContributorInsightsSpecification: { Enabled: true, Mode: m } })),
    );
  }
}

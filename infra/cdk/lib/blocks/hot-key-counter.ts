import {
  Duration,
  RemovalPolicy,
  Validations,
  aws_cloudwatch as cw,
  aws_dynamodb as dynamodb,
  aws_events as events,
  aws_events_targets as targets,
  aws_kinesis as kinesis,
  aws_lambda as lambda,
  aws_lambda_event_sources as sources,
  aws_sns as sns,
  aws_sqs as sqs,
} from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { EMF_METRICS } from '../observability';
import { TABLES, TableSpec } from '../schema';
import {
  AlarmFactory,
  FunctionDefaults,
  HeatsinkFunction,
  QueueDestination,
  QueueDlq,
  emfMetric,
  failureQueue,
  literalName,
} from './common';

/**
 * Where the aggregator reads the counted table's changes: exactly one source. The table's own
 * stream and its Kinesis streaming destination carry the same changes, so reading both would
 * count every change twice.
 */
export type CounterSource =
  | {
      readonly kind: 'kinesis';
      /** The Kinesis stream the table's streaming destination (Kinesis Data Streams for DynamoDB) writes. */
      readonly stream: kinesis.IStream;
      /** The stream's name, when it was not created with a fixed one. */
      readonly streamName?: string;
    }
  | {
      readonly kind: 'dynamodb-streams';
      /** The counted table, with a stream of `NEW_AND_OLD_IMAGES` (or `NEW_IMAGE`). */
      readonly table: dynamodb.ITableV2;
    };

/** The aggregator's event source mapping. */
export interface CounterBatching {
  /** Records per batch (Lambda `BatchSize`). @default 1000 */
  readonly batchSize?: number;
  /** Lambda `MaximumBatchingWindowInSeconds`: how long changes gather before a flush. @default 3 */
  readonly windowSeconds?: number;
  /** Retries of a failing batch before its pointer is parked in the stream-failures queue. @default 10 */
  readonly retryAttempts?: number;
  /** A batch older than this is parked instead of retried. @default 6 hours */
  readonly maxRecordAge?: Duration;
}

export interface HotKeyCounterProps extends FunctionDefaults {
  /**
   * Prefix of every name the block creates: `<prefix>counters`, `<prefix>likes-aggregator`,
   * `<prefix>count-rebuilder`, `<prefix>stream-failures`, `<prefix>count-rebuilder-schedule`,
   * and the alarms. The functions read it as `HEATSINK_PREFIX`.
   */
  readonly prefix: string;
  /**
   * The table whose items are counted (insert-only events, e.g. `orders`). The repair recounts
   * one time bucket of one counted value through its write-sharded GSI `by-<countBy>`
   * (partition key `<countBy>_shard`, `<value>#<n>` for n in 0..16; sort key `timeAttribute`,
   * a Number of Unix milliseconds), so the table must have that index and its writers must
   * set both attributes.
   */
  readonly table: dynamodb.ITableV2;
  /** The table's name, when it was not created with a fixed one. */
  readonly tableName?: string;
  /** The String attribute whose value is counted (`customer`: one counter per customer). */
  readonly countBy: string;
  /** The counter's name: items are `<counter>#<value>` in the counters table. @default countBy */
  readonly counter?: string;
  /** The Number attribute holding the Unix milliseconds at which an item became durable. */
  readonly timeAttribute: string;
  /** Where the aggregator reads the table's changes. */
  readonly source: CounterSource;
  /** The aggregator's batching. */
  readonly batching?: CounterBatching;
  /** Reserved concurrency. @default aggregator 20 (one batch per shard plus a reshard's parents and children), rebuilder 1 */
  readonly concurrency?: { readonly aggregator?: number; readonly rebuilder?: number };
  /** Every alarm of the block notifies this topic on ALARM and OK (see `AlarmTopic`). */
  readonly alarmTopic?: sns.ITopic;
  /**
   * Where failed rebuilder invocations and undeliverable schedule events are parked.
   * @default a queue of the block's own, `<prefix>count-rebuilder-failures`
   */
  readonly asyncFailures?: sqs.IQueue;
  /**
   * Sub-keys of closed shards are folded, and their tombstones deleted this long after the
   * source's retention ends (no record left to replay). @default 24 hours (DynamoDB Streams; a
   * 24-hour Kinesis stream)
   */
  readonly compactGrace?: Duration;
  /**
   * Alarm when the oldest parked batch pointer is this old: its records leave the source's
   * retention soon after, and with them the last chance to replay them. @default 12 hours (half
   * of a 24-hour source)
   */
  readonly parkedAgeAlarm?: Duration;
  /** @default RETAIN (the counters table holds the counts) */
  readonly removalPolicy?: RemovalPolicy;
}

/**
 * Pre-aggregated counters over one of your tables, exact on every stream shape.
 *
 * Creates the counters table (`<prefix>counters`, with the `touched` index the repair reads),
 * `likes-aggregator` on the table's change source (partial batch failures, bisect on error,
 * failed batches' pointers parked in `<prefix>stream-failures`), `count-rebuilder` every 5
 * minutes (repairs buckets only once the aggregator's watermarks prove every change was
 * processed), their alarms and dashboard widgets. Each function's role holds exactly the calls
 * its code makes (`infra/grants.json`).
 *
 * Limits: one counter per prefix; the functions' EMF metrics carry `Function=likes-aggregator` /
 * `count-rebuilder` whatever the prefix, so two counters in one account and region share those
 * series (give each its own account or region, or tell them apart by log group).
 */
export class HotKeyCounter extends Construct {
  /** The counters table (`<prefix>counters`). */
  public readonly countersTable: dynamodb.TableV2;
  public readonly aggregator: HeatsinkFunction;
  public readonly rebuilder: HeatsinkFunction;
  /** Pointers of batches given up on. */
  public readonly streamFailures: sqs.Queue;
  public readonly asyncFailures: sqs.IQueue;
  public readonly alarms: cw.Alarm[];
  /** Dashboard widgets, one row per entry. */
  public readonly widgets: cw.IWidget[][] = [];
  /** The aggregator's event source mapping (its UUID, the dimension of its EventCount metrics). */
  public readonly eventSourceMappingId: string;
  /** The aggregator's iterator age (Lambda `IteratorAge`, maximum per minute). */
  public readonly iteratorAge: cw.Metric;

  constructor(scope: Construct, id: string, props: HotKeyCounterProps) {
    super(scope, id);
    const prefix = props.prefix;
    const counter = props.counter ?? props.countBy;
    const tableName = literalName(props.table, props.tableName, 'HotKeyCounter table');
    const spec = TABLES.find((t) => t.logical === 'counters') as TableSpec;
    this.countersTable = toolkitTable(this, 'Counters', `${prefix}counters`, spec, props.removalPolicy);

    this.streamFailures = failureQueue(this, 'StreamFailures', `${prefix}stream-failures`);
    Validations.of(this.streamFailures).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SQS3',
      reason:
        'This queue is itself the on-failure destination of the stream event source mapping (it holds batch pointers for replay); it needs no DLQ of its own.',
    });
    this.asyncFailures = props.asyncFailures ?? asyncFailureQueue(this, `${prefix}count-rebuilder-failures`);

    // The stream the aggregator is mapped to: both functions list its shards (the lineage). The
    // rebuilder makes every listed shard prove progress before a bucket is judged (a shard that
    // never flushed blocks instead of being ignored); the aggregator retires a parent once every
    // child has a watermark, so proven progress does not freeze after a reshard.
    const sourceArn = sourceStreamArn(props.source);
    const counting = {
      HEATSINK_PREFIX: prefix,
      HEATSINK_COUNTER: counter,
      HEATSINK_COUNT_BY: props.countBy,
      HEATSINK_EVENTS_TABLE: tableName,
      HEATSINK_EVENT_TIME_ATTRIBUTE: props.timeAttribute,
      HEATSINK_COUNTERS_TABLE: `${prefix}counters`,
      HEATSINK_SOURCE_ARN: sourceArn,
      RUST_LOG: 'info',
    };
    this.aggregator = new HeatsinkFunction(this, 'Aggregator', {
      ...props,
      functionName: `${prefix}likes-aggregator`,
      binary: 'likes-aggregator',
      description: 'changes -> pre-aggregated counter flushes',
      memory: 256,
      timeout: Duration.seconds(60),
      reservedConcurrency: props.concurrency?.aggregator ?? 20,
      variables: counting,
    });
    this.rebuilder = new HeatsinkFunction(this, 'Rebuilder', {
      ...props,
      functionName: `${prefix}count-rebuilder`,
      binary: 'count-rebuilder',
      description: 'scheduled repair of counters from the durable events; writes fix',
      memory: 512,
      timeout: Duration.seconds(300),
      reservedConcurrency: props.concurrency?.rebuilder ?? 1,
      variables: {
        ...counting,
        // Closed shards' counter sub-keys are folded; their tombstones are deleted after the
        // source's retention, when no record is left to replay.
        HEATSINK_COMPACT_GRACE_SECONDS: String((props.compactGrace ?? Duration.hours(24)).toSeconds()),
        // Parked batches are redriven before each repair (heatsink::counter::redrive::Redrive::drain).
        HEATSINK_STREAM_FAILURES_URL: this.streamFailures.queueUrl,
      },
    });
    // Scheduled: no async retries (the next tick is the retry; concurrency 1 must not queue
    // duplicates), failures parked.
    this.rebuilder.fn.configureAsyncInvoke({
      retryAttempts: 0,
      maxEventAge: Duration.minutes(5),
      onFailure: new QueueDestination(this.asyncFailures, this.rebuilder),
    });

    // Every grant is a call the function's code makes (infra/grants.json, recorded by
    // tests/tests/it/grants.rs). aggregator: reads the counters it flushes (BatchGetItem),
    // conditional absolute flushes (PutItem), each writer's flushed watermark (UpdateItem).
    const counters = this.countersTable.tableArn;
    this.aggregator.grant(['dynamodb:BatchGetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'], [counters]);
    // count-rebuilder: exactly what `heatsink::counter::rebuild::Repair` calls: Query the
    // `touched` index and each counter and the watermarks, its lease and cursor (PutItem,
    // GetItem, DeleteItem), the bucket fixes (PutItem); COUNT Queries of the table's
    // `by-<countBy>`; compaction of closed shards' sub-keys (UpdateItem; the tombstones' reap:
    // DeleteItem); the sweep of quiet counters (Scan pages of the counters table from its
    // cursor).
    this.rebuilder.grant(['dynamodb:Query'], [`${props.table.tableArn}/index/by-${props.countBy}`]);
    this.rebuilder.grant(['dynamodb:Query'], [`${counters}/index/touched`]);
    this.rebuilder.grant(
      ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:Scan'],
      [counters],
    );
    // The lineage (`heatsink::counter::lineage::for_stream_arn`): ListShards of the Kinesis
    // stream, or DescribeStream of the table's stream. The aggregator makes the same call, which
    // its event source mapping's grants already hold.
    this.rebuilder.grant([props.source.kind === 'kinesis' ? 'kinesis:ListShards' : 'dynamodb:DescribeStream'], [sourceArn]);
    // The redrive of parked batches (`heatsink::counter::redrive::Redrive::drain`): the
    // stream-failures queue's messages (received; deleted once their checks are saved; KMS
    // decrypts them for the role) and each parked range read back from the stream.
    this.rebuilder.grant(['sqs:ReceiveMessage', 'sqs:DeleteMessage'], [this.streamFailures.queueArn]);
    if (this.streamFailures.encryptionMasterKey) {
      this.rebuilder.grant(['kms:Decrypt'], [this.streamFailures.encryptionMasterKey.keyArn]);
    }
    this.rebuilder.grant(
      props.source.kind === 'kinesis'
        ? ['kinesis:GetShardIterator', 'kinesis:GetRecords']
        : ['dynamodb:GetShardIterator', 'dynamodb:GetRecords'],
      [sourceArn],
    );

    // ---- the aggregator's one event source ----
    const batching = props.batching ?? {};
    const streamSource = {
      startingPosition: lambda.StartingPosition.TRIM_HORIZON,
      batchSize: batching.batchSize ?? 1000,
      maxBatchingWindow: Duration.seconds(batching.windowSeconds ?? 3),
      bisectBatchOnError: true,
      reportBatchItemFailures: true,
      parallelizationFactor: 1,
      retryAttempts: batching.retryAttempts ?? 10,
      maxRecordAge: batching.maxRecordAge ?? Duration.hours(6),
      onFailure: new QueueDlq(this.streamFailures, this.aggregator),
      // EventCount metrics (AWS/Lambda by EventSourceMappingUUID): dropped and parked events alarm.
      metricsConfig: { metrics: [lambda.MetricType.EVENT_COUNT] },
    };
    const source =
      props.source.kind === 'kinesis'
        ? new sources.KinesisEventSource(props.source.stream, streamSource)
        : new sources.DynamoEventSource(props.source.table, streamSource);
    this.aggregator.fn.addEventSource(source);
    this.eventSourceMappingId = source.eventSourceMappingId;

    new events.Rule(this, 'Schedule', {
      ruleName: `${prefix}count-rebuilder-schedule`,
      schedule: events.Schedule.rate(Duration.minutes(5)),
      targets: [eventTarget(this.rebuilder, this.asyncFailures)],
    });

    // ---- alarms ----
    const f = new AlarmFactory(this, props.alarmTopic);
    this.alarms = f.alarms;
    const perRun = Duration.minutes(5);
    this.iteratorAge = this.aggregator.fn.metric('IteratorAge', { statistic: 'Maximum', period: Duration.minutes(1) });
    f.alarm('AggregatorIteratorAge', {
      alarmName: `${prefix}likes-aggregator-iterator-age`,
      alarmDescription: 'likes-aggregator is more than 60 s behind its event source. Runbook: README "Alarms".',
      metric: this.iteratorAge,
      threshold: 60_000,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    f.alarm('StreamFailuresVisible', {
      alarmName: `${prefix}stream-failures`,
      alarmDescription: 'Stream batches were given up on and parked in the stream-failures queue. Runbook: README "Alarms".',
      metric: this.streamFailures.metricApproximateNumberOfMessagesVisible({ statistic: 'Maximum', period: Duration.minutes(1) }),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    const parkedAge = props.parkedAgeAlarm ?? Duration.hours(12);
    f.alarm('StreamFailuresAge', {
      alarmName: `${prefix}stream-failures-age`,
      alarmDescription: `The oldest parked batch pointer in stream-failures is ${parkedAge.toHours()} h old: replay it before its records leave the source's retention. Runbook: README "Alarms".`,
      metric: this.streamFailures.metricApproximateAgeOfOldestMessage({ statistic: 'Maximum', period: Duration.minutes(5) }),
      threshold: parkedAge.toSeconds(),
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    // Any correction means changes were lost or applied twice between the table and the
    // counters, and the rebuilder repaired the counts (docs/counters.md).
    f.alarm('CounterCorrections', {
      alarmName: `${prefix}counter-corrections`,
      alarmDescription:
        'count-rebuilder corrected counters: changes were lost or applied twice upstream of counters (a lost batch, an aggregator fault); the counts are repaired. Runbook: README "Alarms".',
      // No label: a labelled metric would synthesize as a one-query metric-math alarm.
      metric: emfMetric(EMF_METRICS.counterCorrection, 'count-rebuilder', 'Sum', undefined, perRun),
      threshold: 0,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    // The mapping's own counts (MetricsConfig EventCount): events it dropped without parking them
    // (lost to the counters until a repair), and events it parked in stream-failures.
    const esmMetric = (metricName: string) =>
      new cw.Metric({
        namespace: 'AWS/Lambda',
        metricName,
        dimensionsMap: { EventSourceMappingUUID: this.eventSourceMappingId },
        statistic: 'Sum',
        period: Duration.minutes(5),
      });
    f.alarm('DroppedEvents', {
      alarmName: `${prefix}likes-aggregator-dropped-events`,
      alarmDescription:
        "likes-aggregator's event source mapping dropped events without parking them (DroppedEventCount). Runbook: README \"Alarms\".",
      metric: esmMetric('DroppedEventCount'),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    f.alarm('ParkedEvents', {
      alarmName: `${prefix}likes-aggregator-parked-events`,
      alarmDescription:
        "likes-aggregator's event source mapping parked events in the stream-failures queue (OnFailureDestinationDeliveredEventCount). Runbook: README \"Alarms\".",
      metric: esmMetric('OnFailureDestinationDeliveredEventCount'),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    functionAlarms(f, this.aggregator, 'likes-aggregator', prefix, props.concurrency?.aggregator ?? 20);
    functionAlarms(f, this.rebuilder, 'count-rebuilder', prefix, props.concurrency?.rebuilder ?? 1);
    heartbeat(f, prefix, 'count-rebuilder', EMF_METRICS.rebuildCompleted, Duration.minutes(15), 'every 5 minutes');
    // A blocked run judges nothing yet still emits CounterRebuildCompleted, so the heartbeat does
    // not see it. One blocked run during a reshard is normal (a new child shard has not flushed
    // yet); three in a row mean a writer is silent. Missing data is not breaching: the heartbeat
    // covers missing runs.
    f.alarm('RepairBlocked', {
      alarmName: `${prefix}count-rebuilder-blocked`,
      alarmDescription:
        'count-rebuilder judged nothing in 3 runs in a row: proven progress is blocked (a shard without a watermark, replication lag past settle, or nothing proven), so no counter is repaired. Runbook: README "Alarms".',
      metric: emfMetric(EMF_METRICS.repairBlocked, 'count-rebuilder', 'Maximum', undefined, perRun),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 3,
      datapointsToAlarm: 3,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    // Buckets are repaired only once proven progress is past them: 15 minutes behind in three runs
    // in a row means corrections are late by as much (not emitted while blocked: the alarm above).
    f.alarm('RepairLag', {
      alarmName: `${prefix}count-rebuilder-repair-lag`,
      alarmDescription:
        "The aggregator's proven progress was more than 900 s behind count-rebuilder's clock in 3 runs in a row (CounterRepairLag): buckets after it are not repaired yet. Runbook: README \"Alarms\".",
      metric: emfMetric(EMF_METRICS.repairLag, 'count-rebuilder', 'Maximum', undefined, perRun),
      threshold: 900,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 3,
      datapointsToAlarm: 3,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    // The dedupe window's size guard shed identities: a duplicate of one is counted (as late).
    // Emitted only when above 0, so no datapoint is the normal case: missing is not breaching.
    f.alarm('DedupeShed', {
      alarmName: `${prefix}likes-aggregator-dedupe-shed`,
      alarmDescription:
        "likes-aggregator's dedupe window reached its size bound and shed change identities (CounterDedupeShed): a duplicate of one counts until the bucket repair corrects it. Runbook: README \"Alarms\".",
      metric: emfMetric(EMF_METRICS.dedupeShed, 'likes-aggregator', 'Sum', undefined, perRun),
      threshold: 0,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    // Any change older than the dedupe window (10 s, far above the reordering AWS shows) was
    // counted without a duplicate check: it may count twice until the repair corrects it.
    f.alarm('LateChanges', {
      alarmName: `${prefix}likes-aggregator-late-changes`,
      alarmDescription:
        'likes-aggregator counted changes older than its dedupe window (CounterLateChanges): each may be a duplicate counted twice until the bucket repair corrects it. Runbook: README "Alarms".',
      metric: emfMetric(EMF_METRICS.lateChanges, 'likes-aggregator', 'Sum', undefined, perRun),
      threshold: 0,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });

    if (props.source.kind === 'kinesis') {
      const stream = props.source.stream;
      const streamName = literalName(stream, props.source.streamName, 'HotKeyCounter source stream');
      f.alarm('StreamWriteThrottled', {
        alarmName: `${streamName}-write-throttled`,
        alarmDescription: `Puts to ${streamName} exceeded a shard's 1,000 records/s or 1 MB/s. Runbook: README "Alarms".`,
        metric: stream.metricPutRecordsThrottledRecords({ statistic: 'Sum', period: Duration.minutes(1) }),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 3,
        datapointsToAlarm: 2,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
      // The Kinesis streaming destination: how far behind the table's changes the copy is.
      // AgeOfOldestUnreplicatedRecord (AWS/DynamoDB, ms since the oldest change not yet copied to
      // the stream first appeared in the table) is the replication lag DynamoDB publishes for
      // Kinesis Data Streams for DynamoDB.
      f.alarm('ReplicationLag', {
        alarmName: `${tableName}-kinesis-replication-lag`,
        alarmDescription: `${tableName} changes are more than 60 s old before reaching ${streamName}. Runbook: README "Alarms".`,
        metric: new cw.Metric({
          namespace: 'AWS/DynamoDB',
          metricName: 'AgeOfOldestUnreplicatedRecord',
          dimensionsMap: { TableName: tableName },
          statistic: 'Maximum',
          period: Duration.minutes(1),
        }),
        threshold: 60_000,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 5,
        datapointsToAlarm: 3,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
      f.alarm('ReplicationFailed', {
        alarmName: `${tableName}-kinesis-replication-failed`,
        alarmDescription: `DynamoDB failed to copy ${tableName} changes to ${streamName}. Runbook: README "Alarms".`,
        metric: new cw.Metric({
          namespace: 'AWS/DynamoDB',
          metricName: 'FailedToReplicateRecordCount',
          dimensionsMap: { TableName: tableName },
          statistic: 'Sum',
          period: Duration.minutes(1),
        }),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
      f.alarm('StreamIteratorAge', {
        alarmName: `${streamName}-iterator-age`,
        alarmDescription: `Readers of ${streamName} are more than 60 s behind (GetRecords.IteratorAgeMilliseconds). Runbook: README "Alarms".`,
        metric: stream.metricGetRecordsIteratorAgeMilliseconds({ statistic: 'Maximum', period: Duration.minutes(1) }),
        threshold: 60_000,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 5,
        datapointsToAlarm: 3,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
    }

    // ---- dashboard ----
    const iteratorAges: cw.IMetric[] = [this.iteratorAge.with({ label: 'likes-aggregator IteratorAge' })];
    if (props.source.kind === 'kinesis') {
      iteratorAges.push(props.source.stream.metricGetRecordsIteratorAgeMilliseconds({ statistic: 'Maximum', period: Duration.minutes(1) }));
    }
    this.widgets.push([
      new cw.GraphWidget({
        title: 'Counter lag (events applied, not yet flushed) and flush delay',
        left: [emfMetric(EMF_METRICS.counterLag, 'likes-aggregator')],
        right: [emfMetric(EMF_METRICS.counterFlushDelay, 'likes-aggregator')],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'Stream iterator age (ms)',
        left: iteratorAges,
        leftAnnotations: [{ value: 60_000, label: 'alarm' }],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'Counter corrections (count-rebuilder)',
        left: [
          emfMetric(EMF_METRICS.counterCorrection, 'count-rebuilder', 'Sum', 'likes corrected', perRun),
          emfMetric(EMF_METRICS.countersCorrected, 'count-rebuilder', 'Sum', 'counters corrected', perRun),
        ],
        right: [
          emfMetric(EMF_METRICS.countersUnsettled, 'count-rebuilder', 'Maximum', 'counters unsettled', perRun),
          emfMetric(EMF_METRICS.rebuildCompleted, 'count-rebuilder', 'Sum', 'runs completed', perRun),
        ],
        period: perRun,
        width: 8,
        height: 6,
      }),
    ]);
    this.widgets.push([
      new cw.GraphWidget({
        title: 'Counter repair progress (count-rebuilder)',
        left: [emfMetric(EMF_METRICS.repairLag, 'count-rebuilder', 'Maximum', 'proven progress behind (s)', perRun)],
        leftAnnotations: [{ value: 900, label: 'alarm' }],
        right: [
          emfMetric(EMF_METRICS.repairBlocked, 'count-rebuilder', 'Maximum', 'run blocked', perRun),
          emfMetric(EMF_METRICS.rebuildLagging, 'count-rebuilder', 'Maximum', 'checks lagging', perRun),
        ],
        period: perRun,
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'Counter dedupe (likes-aggregator): late, shed, duplicates, foreign',
        left: [
          emfMetric(EMF_METRICS.lateChanges, 'likes-aggregator', 'Sum', 'late, counted unchecked'),
          emfMetric(EMF_METRICS.dedupeShed, 'likes-aggregator', 'Sum', 'identities shed'),
        ],
        right: [
          emfMetric(EMF_METRICS.duplicatesDropped, 'likes-aggregator', 'Sum', 'duplicates dropped'),
          emfMetric(EMF_METRICS.foreignRecords, 'likes-aggregator', 'Sum', 'foreign records skipped'),
        ],
        width: 8,
        height: 6,
      }),
    ]);
  }
}

/** The ARN of the stream the aggregator reads: the Kinesis stream, or the table's stream. */
function sourceStreamArn(source: CounterSource): string {
  if (source.kind === 'kinesis') return source.stream.streamArn;
  const arn = source.table.tableStreamArn;
  if (!arn) throw new Error('HotKeyCounter: the dynamodb-streams source table has no stream (set dynamoStream on it)');
  return arn;
}

/** A table of heatsink's own schema (counters, hotkeys, leases): on-demand, PITR, deletion protection. */
export function toolkitTable(
  scope: Construct,
  id: string,
  tableName: string,
  spec: TableSpec,
  removalPolicy?: RemovalPolicy,
): dynamodb.TableV2 {
  return new dynamodb.TableV2(scope, id, {
    tableName,
    partitionKey: attribute(spec.partitionKey),
    sortKey: spec.sortKey && attribute(spec.sortKey),
    billing: dynamodb.Billing.onDemand(),
    timeToLiveAttribute: spec.ttlAttribute,
    pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
    // A `cdk destroy` or a replaced resource must not take the data with it.
    deletionProtection: true,
    globalSecondaryIndexes: spec.gsis.map((g) => ({
      indexName: g.name,
      partitionKey: attribute(g.partitionKey),
      sortKey: g.sortKey && attribute(g.sortKey),
      projectionType: dynamodb.ProjectionType.ALL,
    })),
    removalPolicy: removalPolicy ?? RemovalPolicy.RETAIN,
  });
}

export function attribute(a: { name: string; type: 'S' | 'N' | 'B' }): dynamodb.Attribute {
  const type = { S: dynamodb.AttributeType.STRING, N: dynamodb.AttributeType.NUMBER, B: dynamodb.AttributeType.BINARY }[a.type];
  return { name: a.name, type };
}

/** Failed asynchronous invocations and events EventBridge could not deliver: nothing is dropped silently. */
export function asyncFailureQueue(scope: Construct, queueName: string): sqs.Queue {
  const q = failureQueue(scope, 'AsyncFailures', queueName);
  Validations.of(q).acknowledge({
    id: 'AwsSolutions::AwsSolutions-SQS3',
    reason:
      'This queue is itself the on-failure destination of the asynchronous invocations and the EventBridge targets; it needs no DLQ of its own.',
  });
  return q;
}

/** EventBridge delivers asynchronously: 2 delivery retries within 10 minutes, then the event is parked. */
export function eventTarget(fn: HeatsinkFunction, parked: sqs.IQueue): targets.LambdaFunction {
  return new targets.LambdaFunction(fn.fn, { retryAttempts: 2, maxEventAge: Duration.minutes(10), deadLetterQueue: parked });
}

/** Unhandled errors and throttles (reserved concurrency reached) of one function. */
export function functionAlarms(f: AlarmFactory, fn: HeatsinkFunction, name: string, prefix: string, concurrency: number): void {
  f.alarm(`Errors-${name}`, {
    alarmName: `${prefix}${name}-errors`,
    alarmDescription: `${prefix}${name} failed invocations (Lambda Errors). Runbook: README "Alarms".`,
    metric: fn.fn.metricErrors({ statistic: 'Sum', period: Duration.minutes(5) }),
    threshold: 1,
    comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    evaluationPeriods: 1,
    treatMissingData: cw.TreatMissingData.NOT_BREACHING,
  });
  f.alarm(`Throttles-${name}`, {
    alarmName: `${prefix}${name}-throttles`,
    alarmDescription: `${prefix}${name} invocations throttled at its reserved concurrency (${concurrency}). Runbook: README "Alarms".`,
    metric: fn.fn.metricThrottles({ statistic: 'Sum', period: Duration.minutes(5) }),
    threshold: 1,
    comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    evaluationPeriods: 1,
    treatMissingData: cw.TreatMissingData.NOT_BREACHING,
  });
}

/** A scheduled function emits `metric` after every successful run (0s included): none means it stopped. */
export function heartbeat(f: AlarmFactory, prefix: string, emitter: string, metric: string, every: Duration, runs: string): void {
  f.alarm(`Heartbeat-${emitter}`, {
    alarmName: `${prefix}${emitter}-heartbeat`,
    alarmDescription: `${prefix}${emitter} runs ${runs} and emits ${metric} each time; none for ${every.toMinutes()} minutes. Runbook: README "Alarms".`,
    metric: emfMetric(metric, emitter, 'SampleCount', undefined, every),
    threshold: 1,
    comparisonOperator: cw.ComparisonOperator.LESS_THAN_THRESHOLD,
    evaluationPeriods: 1,
    treatMissingData: cw.TreatMissingData.BREACHING,
  });
}

import {
  CfnOutput,
  Duration,
  RemovalPolicy,
  Stack,
  StackProps,
  Validations,
  aws_apigateway as apigwv1,
  aws_apigatewayv2 as apigw,
  aws_apigatewayv2_authorizers as authorizers,
  aws_apigatewayv2_integrations as integrations,
  aws_cloudwatch as cw,
  aws_cognito as cognito,
  aws_dynamodb as dynamodb,
  aws_events as events,
  aws_iam as iam,
  aws_kinesis as kinesis,
  aws_kms as kms,
  aws_lambda as lambda,
  aws_logs as logs,
  aws_sns as sns,
} from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { Autopilot } from './autopilot';
import { AlarmTopic } from './blocks/alarm-topic';
import { AlarmFactory, HeatsinkBinary, HeatsinkFunction, TracingMode, emfMetric } from './blocks/common';
import { HotKeyCounter, asyncFailureQueue, attribute, functionAlarms } from './blocks/hot-key-counter';
import { ContributorInsightsMode, GuardedTable, HotKeyGuard, SAMPLER_DETAIL_TYPE, SAMPLER_SOURCE } from './blocks/hot-key-guard';
import { StreamLeases } from './blocks/stream-leases';
import { EMF_METRICS, EMF_PROCESSES } from './observability';
import { DEFAULT_PREFIX, FUNCTION_NAMES, FunctionName, SHARD_RECORDS_CEILING, STREAMS, TABLES } from './schema';
import { ESM } from './esm';

export { SAMPLER_DETAIL_TYPE, SAMPLER_SOURCE };
export type { ContributorInsightsMode };


/**
 * Where likes-aggregator reads the `liked` table's changes from. Exactly one: the same change
 * reaches both the table's own stream and (through the Kinesis streaming destination) like-events,
 * so consuming both would count every like twice.
 *  - `kinesis`: Kinesis Data Streams for DynamoDB, the like-events stream (production default).
 *  - `dynamodb-streams`: the table's own DynamoDB stream; no Kinesis streaming destination.
 */
export type LikeEventsSource = 'kinesis' | 'dynamodb-streams';
export const LIKE_EVENTS_SOURCES: readonly LikeEventsSource[] = ['kinesis', 'dynamodb-streams'];

/** An external OpenID Connect issuer whose JWTs the likes API accepts (instead of the stack's user pool). */
export interface JwtIssuer {
  /** The issuer URL (`iss` claim), e.g. `https://login.example.com/`. */
  readonly issuer: string;
  /** Accepted `aud` (or Cognito `client_id`) values. */
  readonly audience: string[];
}

/** A table the controller watches, and what its hot keys need (`HEATSINK_CONTROLLER_TABLES`). */
export interface ControllerTable {
  /** Logical table name (without the prefix). */
  readonly table: string;
  readonly kind: 'read' | 'write';
}

/** Reserved concurrency per function: a cap (and a guarantee) so one cannot starve the others. */
export const DEFAULT_CONCURRENCY: Record<FunctionName, number> = {
  // 50 instances × the per-post limit (2,000/s) is above the stage throttle: the stage binds.
  'likes-api': 50,
  // like-events' 13 shards (infra/esm.json) × parallelization 1, plus room for parent and child
  // shards during a reshard.
  'likes-aggregator': 20,
  // Never concurrent with itself: one recount, one directory writer, one control period at a time.
  'count-rebuilder': 1,
  'hotkey-controller': 1,
  autopilot: 1,
};

export interface HeatsinkStackProps extends StackProps {
  /** Prefix of every table, stream, function, rule and alarm name (`HEATSINK_PREFIX`). */
  readonly prefix?: string;
  /** The deployment package of each function (prebuilt `bootstrap.zip`, or a placeholder in tests). */
  readonly code: (name: FunctionName) => lambda.Code;
  /** @default ARM_64 */
  readonly architecture?: lambda.Architecture;
  /**
   * DynamoDB Contributor Insights mode on every table and GSI. @default per table: accessed and
   * throttled keys on the tables the controller acts on (counters and its index), throttled keys
   * elsewhere (see {@link GuardedTable.contributorInsights})
   */
  readonly contributorInsightsMode?: ContributorInsightsMode;
  /** Hot-partition alarms fire at this fraction of the per-partition / per-shard ceiling. @default 0.8 */
  readonly hotPartitionFraction?: number;
  /** The aggregator's single event source (see {@link LikeEventsSource}). @default infra/esm.json's `source` ('kinesis') */
  readonly likeEventsSource?: LikeEventsSource;
  /** @default RETAIN (tables and the stream hold user data) */
  readonly removalPolicy?: RemovalPolicy;
  /**
   * Who may call the likes API: an external OIDC issuer and audience. Without one the stack
   * creates a Cognito user pool (admin-created users, MFA required) and an app client, and the
   * routes accept that pool's tokens.
   */
  readonly jwtIssuer?: JwtIssuer;
  /** Reserved concurrency per function. @default DEFAULT_CONCURRENCY */
  readonly concurrency?: Partial<Record<FunctionName, number>>;
  /** X-Ray tracing of every function (see {@link TracingMode}). @default 'PassThrough' */
  readonly tracing?: TracingMode;
  /** Retention of the functions' and the API's log groups. @default ONE_MONTH (Terraform: log_retention_days = 30) */
  readonly logRetention?: logs.RetentionDays;
  /**
   * Keep each request's source IP in the API access log (`$context.identity.sourceIp`), for
   * finding a flood's origin; an IP is personal data, kept as long as the log (30 days).
   * @default false
   */
  readonly accessLogSourceIp?: boolean;
  /** Tables hotkey-controller watches (its grants follow). @default counters, read-hot */
  readonly controllerTables?: ControllerTable[];
  /**
   * The autopilot's act switch (`HEATSINK_AUTOPILOT_ACT`). Off, the autopilot is a dry run: the
   * loop only reports what it would do (logs, EMF metrics), and its role holds no
   * kinesis:SplitShard or kinesis:MergeShards. On, it splits and merges like-events' shards
   * within its budgets; `heatsink autopilot pause --stream <prefix>like-events --reason ...` is
   * the kill switch either way (infra/README.md, "The autopilot").
   * @default false (dry run: the loop only reports what it would do)
   */
  readonly autopilotAct?: boolean;
}


/**
 * heatsink's photo app, built from the blocks (`lib/index.ts`): the `liked` and `posts` tables
 * and the like-events stream, likes-api behind an authenticated HTTP API, a {@link HotKeyCounter}
 * counting likes per post, a {@link HotKeyGuard} on every table and GSI, {@link StreamLeases}
 * for stream consumers, the {@link Autopilot} over like-events (a dry run unless
 * `autopilotAct`), one {@link AlarmTopic} and a dashboard.
 */
export class HeatsinkStack extends Stack {
  public readonly tables: Record<string, dynamodb.TableV2> = {};
  public readonly streams: Record<string, kinesis.Stream> = {};
  public readonly functions = {} as Record<FunctionName, lambda.Function>;
  public readonly alarms: cw.Alarm[] = [];
  public readonly alarmTopic: sns.Topic;
  public readonly alarmKey: kms.Key;
  public readonly controlBus: events.EventBus;
  public readonly samplerPublisher: iam.Role;
  public readonly userPool?: cognito.UserPool;
  public readonly counter: HotKeyCounter;
  public readonly guard: HotKeyGuard;
  public readonly leases: StreamLeases;
  public readonly autopilot: Autopilot;

  constructor(scope: Construct, id: string, props: HeatsinkStackProps) {
    super(scope, id, props);
    const prefix = props.prefix ?? DEFAULT_PREFIX;
    const fraction = props.hotPartitionFraction ?? 0.8;
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    const likeEventsSource = props.likeEventsSource ?? ESM.source;
    if (!LIKE_EVENTS_SOURCES.includes(likeEventsSource)) {
      throw new Error(`likeEventsSource must be one of ${LIKE_EVENTS_SOURCES.join(', ')}, not ${likeEventsSource}`);
    }
    const concurrency = { ...DEFAULT_CONCURRENCY, ...(props.concurrency ?? {}) };
    const controllerTables = props.controllerTables ?? [{ table: 'counters', kind: 'read' }];
    for (const c of controllerTables) {
      if (!TABLES.some((spec) => spec.logical === c.table)) throw new Error(`controllerTables: no table ${c.table}`);
    }
    // Every function of the stack: the capacity log samples 1 call in 100, partition keys hashed
    // except on tables keyed by non-personal ids (`liked` is keyed by the user: hashed).
    const logRetention = props.logRetention ?? logs.RetentionDays.ONE_MONTH;
    const functionDefaults = {
      // The photo app's functions only (HeatsinkBinary also names the blocks' others).
      code: (binary: HeatsinkBinary) => {
        if (!(FUNCTION_NAMES as readonly string[]).includes(binary)) throw new Error(`the photo app deploys no ${binary}`);
        return props.code(binary as FunctionName);
      },
      tracing: props.tracing,
      logRetention,
      architecture: props.architecture ?? lambda.Architecture.ARM_64,
      environment: {
        HEATSINK_CAPACITY_LOG_SAMPLE: '100',
        HEATSINK_CAPACITY_LOG_CLEAR_TABLES: ['counters', 'hotkeys', 'posts', 'leases', 'autopilot'].map((t) => `${prefix}${t}`).join(','),
      },
    };

    // ---- Kinesis ------------------------------------------------------------------------------
    for (const spec of STREAMS) {
      this.streams[spec.logical] = new kinesis.Stream(this, `Stream-${spec.logical}`, {
        streamName: `${prefix}${spec.logical}`,
        shardCount: ESM.streamMode === 'PROVISIONED' ? spec.shards : undefined,
        streamMode: ESM.streamMode === 'PROVISIONED' ? kinesis.StreamMode.PROVISIONED : kinesis.StreamMode.ON_DEMAND,
        encryption: kinesis.StreamEncryption.MANAGED,
        retentionPeriod: Duration.hours(24),
        removalPolicy,
      });
    }
    const likeEvents = this.streams['like-events'];

    // ---- The photo app's own tables (the blocks create counters, hotkeys and leases; the autopilot its own)
    for (const spec of TABLES.filter((t) => t.logical === 'liked' || t.logical === 'posts')) {
      this.tables[spec.logical] = new dynamodb.TableV2(this, `Table-${spec.logical}`, {
        tableName: `${prefix}${spec.logical}`,
        partitionKey: attribute(spec.partitionKey),
        sortKey: spec.sortKey && attribute(spec.sortKey),
        billing: dynamodb.Billing.onDemand(),
        dynamoStream: spec.stream && dynamodb.StreamViewType[spec.stream],
        timeToLiveAttribute: spec.ttlAttribute,
        // Only the Kinesis source needs the copy; with DynamoDB Streams the stream stays, unfed by the table.
        kinesisStream:
          spec.kinesisDestination && likeEventsSource === 'kinesis' ? this.streams[spec.kinesisDestination] : undefined,
        pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
        // A `cdk destroy` or a replaced resource must not take the data with it.
        deletionProtection: true,
        globalSecondaryIndexes: spec.gsis.map((g) => ({
          indexName: g.name,
          partitionKey: attribute(g.partitionKey),
          sortKey: g.sortKey && attribute(g.sortKey),
          projectionType: dynamodb.ProjectionType.ALL,
        })),
        resourcePolicy: spec.logical === 'liked' ? insertOnly(this, `${prefix}${spec.logical}`) : undefined,
        removalPolicy,
      });
    }

    // ---- Alarm fan-out and the failure queue of the scheduled functions ------------------------
    const alarmTopic = new AlarmTopic(this, 'Alarms', { topicName: `${prefix}alarms` });
    this.alarmTopic = alarmTopic.topic;
    this.alarmKey = alarmTopic.key;
    // Failed asynchronous invocations (EventBridge -> count-rebuilder / hotkey-controller /
    // autopilot) and events EventBridge could not deliver: nothing asynchronous is dropped silently.
    const asyncFailures = asyncFailureQueue(this, `${prefix}async-failures`);

    // ---- likes-api --------------------------------------------------------------------------------
    const likesApi = new HeatsinkFunction(this, 'LikesApiFunction', {
      ...functionDefaults,
      functionName: `${prefix}likes-api`,
      binary: 'likes-api',
      description: 'POST /posts/{post}/likes, GET /posts/{post}',
      memory: 256,
      timeout: Duration.seconds(10),
      reservedConcurrency: concurrency['likes-api'],
      variables: { HEATSINK_PREFIX: prefix, RUST_LOG: 'info' },
    });

    // ---- The counter: likes per post ----------------------------------------------------------------
    this.counter = new HotKeyCounter(this, 'Counter', {
      ...functionDefaults,
      prefix,
      table: this.tables.liked,
      countBy: 'post',
      counter: 'likes',
      timeAttribute: 'liked_at',
      // Exactly one source: both carry the same changes of `liked`, two would count every like twice.
      source: likeEventsSource === 'kinesis' ? { kind: 'kinesis', stream: likeEvents } : { kind: 'dynamodb-streams', table: this.tables.liked },
      batching: {
        batchSize: ESM.batchSize,
        windowSeconds: ESM.windowSeconds,
      },
      concurrency: { aggregator: concurrency['likes-aggregator'], rebuilder: concurrency['count-rebuilder'] },
      alarmTopic: this.alarmTopic,
      asyncFailures,
      // Closed shards' tombstones are deleted after the like-events source's retention (24 h,
      // Kinesis and DynamoDB Streams alike), when no record is left to replay.
      compactGrace: Duration.hours(24),
      removalPolicy,
    });
    this.tables.counters = this.counter.countersTable;
    this.leases = new StreamLeases(this, 'Leases', { tableName: `${prefix}leases`, removalPolicy });
    this.tables.leases = this.leases.table;

    // ---- The autopilot: like-events' control loop, a dry run unless autopilotAct ---------------------
    // like-events exists in both source modes (with dynamodb-streams it is not fed by the table),
    // so the autopilot is deployed in both.
    this.autopilot = new Autopilot(this, 'Autopilot', {
      ...functionDefaults,
      prefix,
      stream: likeEvents,
      act: props.autopilotAct ?? false,
      asyncFailures,
      alarmTopic: this.alarmTopic,
      concurrency: concurrency.autopilot,
      removalPolicy,
    });
    this.tables.autopilot = this.autopilot.table;

    // ---- The guard: every table and GSI ---------------------------------------------------------------
    const guarded: GuardedTable[] = TABLES.filter((spec) => spec.logical !== 'hotkeys').map((spec) => ({
      table: this.tables[spec.logical],
      tableName: `${prefix}${spec.logical}`,
      indexes: spec.gsis.map((g) => g.name),
      hot: controllerTables.find((c) => c.table === spec.logical)?.kind,
      // Unset: the guard's per-table default (accessed keys where the controller acts).
      contributorInsights: props.contributorInsightsMode,
    }));
    this.guard = new HotKeyGuard(this, 'Guard', {
      ...functionDefaults,
      prefix,
      tables: guarded,
      directoryContributorInsights: props.contributorInsightsMode,
      capacityLogGroups: [likesApi.logGroup, this.counter.aggregator.logGroup, this.counter.rebuilder.logGroup, this.autopilot.fn.logGroup],
      hotPartitionFraction: fraction,
      alarmTopic: this.alarmTopic,
      asyncFailures,
      concurrency: concurrency['hotkey-controller'],
      removalPolicy,
    });
    this.tables.hotkeys = this.guard.directory;
    this.controlBus = this.guard.controlBus;
    this.samplerPublisher = this.guard.samplerPublisher;
    this.functions['likes-api'] = likesApi.fn;
    this.functions['likes-aggregator'] = this.counter.aggregator.fn;
    this.functions['count-rebuilder'] = this.counter.rebuilder.fn;
    this.functions['hotkey-controller'] = this.guard.controller.fn;
    this.functions.autopilot = this.autopilot.fn.fn;

    // Every grant below is a call the function's code makes, and nothing else: infra/grants.json
    // lists the calls (recorded by the integration test tests/it/grants.rs through an SDK
    // interceptor), and test/grants.test.ts fails on a missing or an unused grant.
    // likes-api: durable like (conditional put), post lookup, count read, directory Scan.
    likesApi.grant(['dynamodb:PutItem'], [this.tables.liked.tableArn]);
    likesApi.grant(['dynamodb:GetItem'], [this.tables.posts.tableArn]);
    likesApi.grant(['dynamodb:Query'], [this.tables.counters.tableArn]);
    likesApi.grant(['dynamodb:Scan'], [this.tables.hotkeys.tableArn]);

    new CfnOutput(this, 'SamplerPublisherRoleArn', {
      description: 'Routers assume this role to publish sampler reports',
      value: this.samplerPublisher.roleArn,
    });
    new CfnOutput(this, 'ControlBusName', {
      description: 'The event bus routers publish sampler reports to (EventBridgeSink bus)',
      value: this.controlBus.eventBusName,
    });

    // ---- HTTP API ---------------------------------------------------------------------------------
    const accessLogs = new logs.LogGroup(this, 'ApiAccessLogs', {
      logGroupName: `/aws/http-api/${prefix}likes`,
      retention: logRetention,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // Who may call: an external issuer, or a user pool of the stack's own (admin-created users,
    // MFA required, strong passwords). likes-api takes the liking user from the verified `sub`.
    let jwtIssuer: JwtIssuer;
    if (props.jwtIssuer) {
      jwtIssuer = props.jwtIssuer;
    } else {
      const pool = new cognito.UserPool(this, 'Users', {
        userPoolName: `${prefix}users`,
        selfSignUpEnabled: false,
        signInAliases: { email: true },
        mfa: cognito.Mfa.REQUIRED,
        mfaSecondFactor: { otp: true, sms: false },
        passwordPolicy: {
          minLength: 12,
          requireLowercase: true,
          requireUppercase: true,
          requireDigits: true,
          requireSymbols: true,
        },
        accountRecovery: cognito.AccountRecovery.EMAIL_ONLY,
        deletionProtection: true,
        removalPolicy,
      });
      Validations.of(pool).acknowledge({
        id: 'AwsSolutions::AwsSolutions-COG8',
        reason:
          'Threat protection needs the Cognito Plus feature plan, billed per monthly active user; users here are admin-created (no self sign-up) with MFA required. Raise the plan, or bring your own issuer with jwtIssuer.',
      });
      const client = pool.addClient('LikesClient', {
        userPoolClientName: `${prefix}likes`,
        authFlows: { userSrp: true },
        generateSecret: false,
        preventUserExistenceErrors: true,
      });
      this.userPool = pool;
      jwtIssuer = {
        issuer: `https://cognito-idp.${Stack.of(this).region}.amazonaws.com/${pool.userPoolId}`,
        audience: [client.userPoolClientId],
      };
      new CfnOutput(this, 'UserPoolId', { value: pool.userPoolId });
      new CfnOutput(this, 'UserPoolClientId', { value: client.userPoolClientId });
    }
    const authorizer = new authorizers.HttpJwtAuthorizer('LikesJwt', jwtIssuer.issuer, {
      authorizerName: `${prefix}likes-jwt`,
      jwtAudience: jwtIssuer.audience,
    });
    const api = new apigw.HttpApi(this, 'LikesApi', {
      apiName: `${prefix}likes`,
      createDefaultStage: false,
      // Every route, reads included: no route of this API is callable without a valid token.
      defaultAuthorizer: authorizer,
    });
    const stage = new apigw.HttpStage(this, 'LikesApiStage', {
      httpApi: api,
      autoDeploy: true,
      // The stage-wide ceiling bounds the total; behind it likes-api's per-user and per-post
      // admission (429 + Retry-After) and its reserved concurrency.
      throttle: { rateLimit: 20000, burstLimit: 5000 },
      // One JSON line per request. No source IP unless asked for (accessLogSourceIp): the route,
      // status and request id are enough to find a flood's route; an IP is personal data.
      accessLogSettings: {
        destination: new apigw.LogGroupLogDestination(accessLogs),
        format: apigwv1.AccessLogFormat.custom(JSON.stringify(accessLogFields(props.accessLogSourceIp ?? false))),
      },
    });
    const integration = new integrations.HttpLambdaIntegration('LikesApiIntegration', likesApi.fn);
    api.addRoutes({ path: '/posts/{post}/likes', methods: [apigw.HttpMethod.POST], integration, authorizer });
    api.addRoutes({ path: '/posts/{post}', methods: [apigw.HttpMethod.GET], integration, authorizer });
    new CfnOutput(this, 'LikesApiUrl', { value: stage.url });

    // ---- The photo app's own alarms ---------------------------------------------------------------
    const f = new AlarmFactory(this, this.alarmTopic);
    functionAlarms(f, likesApi, 'likes-api', prefix, concurrency['likes-api']);
    f.alarm('AsyncFailuresVisible', {
      alarmName: `${prefix}async-failures`,
      alarmDescription:
        'A count-rebuilder, hotkey-controller or autopilot invocation failed (no retries), or EventBridge could not deliver to it. Runbook: README "Alarms".',
      metric: asyncFailures.metricApproximateNumberOfMessagesVisible({ statistic: 'Maximum', period: Duration.minutes(1) }),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    // The HTTP API: server errors and p99 latency.
    f.alarm('Api5xx', {
      alarmName: `${prefix}likes-api-5xx`,
      alarmDescription: 'The likes HTTP API answered 5xx (likes-api failed or timed out). Runbook: README "Alarms".',
      metric: api.metricServerError({ statistic: 'Sum', period: Duration.minutes(1) }),
      threshold: 5,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 3,
      datapointsToAlarm: 2,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    f.alarm('ApiLatencyP99', {
      alarmName: `${prefix}likes-api-p99-latency`,
      alarmDescription: 'p99 latency of the likes HTTP API is above 1 s. Runbook: README "Alarms".',
      metric: api.metricLatency({ statistic: 'p99', period: Duration.minutes(1) }),
      threshold: 1000,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    this.alarms.push(...this.guard.alarms, ...this.counter.alarms, ...this.autopilot.alarms, ...f.alarms);

    // ---- Dashboard --------------------------------------------------------------------------------
    const dashboard = new cw.Dashboard(this, 'Dashboard', {
      dashboardName: `${prefix}overview`,
      defaultInterval: Duration.hours(3),
    });
    dashboard.addWidgets(
      new cw.TextWidget({
        markdown: `# heatsink (${prefix})\nHottest partition key per table vs the per-partition ceiling (1,000 WCU/s, 3,000 RCU/s, 1,000 records/s per shard); dashed line = alarm threshold.`,
        width: 24,
        height: 2,
      }),
    );
    for (const row of this.guard.widgets) dashboard.addWidgets(...row);
    for (const row of this.counter.widgets) dashboard.addWidgets(...row);
    for (const row of this.autopilot.widgets) dashboard.addWidgets(...row);
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Stream consumer leases (heatsink tail --emf or an embedding service)',
        left: [
          emfMetric(EMF_METRICS.leasesHeld, EMF_PROCESSES.streamConsumer, 'Maximum', 'held (max per worker)'),
          emfMetric(EMF_METRICS.leasesExpired, EMF_PROCESSES.streamConsumer, 'Sum', 'expired, taken over'),
        ],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'Admission: 429s from likes-api',
        left: [emfMetric(EMF_METRICS.admissionRejected, 'likes-api', 'Sum')],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: "like-events: incoming records vs shard ceiling (the table's streaming destination)",
        left: [likeEvents.metricIncomingRecords({ statistic: 'Sum', period: Duration.minutes(1) })],
        leftAnnotations: [{ value: SHARD_RECORDS_CEILING * 60 * STREAMS[0].shards, label: 'all shards, records/min' }],
        width: 8,
        height: 6,
      }),
    );
    dashboard.addWidgets(new cw.AlarmStatusWidget({ title: 'heatsink alarms', alarms: this.alarms, width: 24, height: 8 }));
  }
}

/** The API access log's fields (Terraform: the same, `access_log_source_ip`). */
export function accessLogFields(sourceIp: boolean): Record<string, string> {
  return {
    requestId: '$context.requestId',
    ...(sourceIp ? { ip: '$context.identity.sourceIp' } : {}),
    requestTime: '$context.requestTime',
    routeKey: '$context.routeKey',
    status: '$context.status',
    responseLength: '$context.responseLength',
  };
}

/** The actions that delete or change an item: what an insert-only table refuses. */
export const INSERT_ONLY_DENIED = [
  'dynamodb:DeleteItem',
  'dynamodb:UpdateItem',
  'dynamodb:BatchWriteItem',
  'dynamodb:PartiQLDelete',
  'dynamodb:PartiQLUpdate',
];

/**
 * `liked`'s resource policy: the insert-only rule the counter repair's proof rests on, enforced.
 * Every principal is refused a delete or an update (`AccessDeniedException` naming this policy);
 * likes-api writes conditional inserts only. A like that must go (a user's erasure request) is
 * deleted with writes stopped after removing the `InsertOnly` statement, followed by a
 * `heatsink rebuild` (docs/counters.md).
 */
function insertOnly(scope: Construct, tableName: string): iam.PolicyDocument {
  return new iam.PolicyDocument({
    statements: [
      new iam.PolicyStatement({
        sid: 'InsertOnly',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: INSERT_ONLY_DENIED,
        resources: [Stack.of(scope).formatArn({ service: 'dynamodb', resource: 'table', resourceName: tableName })],
      }),
    ],
  });
}

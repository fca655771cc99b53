import {
  Aws,
  CfnOutput,
  Duration,
  RemovalPolicy,
  Stack,
  StackProps,
  Validations,
  aws_apigatewayv2 as apigw,
  aws_apigatewayv2_authorizers as authorizers,
  aws_apigatewayv2_integrations as integrations,
  aws_cloudwatch as cw,
  aws_cloudwatch_actions as cwActions,
  aws_cognito as cognito,
  aws_dynamodb as dynamodb,
  aws_events as events,
  aws_events_targets as targets,
  aws_iam as iam,
  aws_kinesis as kinesis,
  aws_kms as kms,
  aws_lambda as lambda,
  aws_lambda_destinations as destinations,
  aws_lambda_event_sources as sources,
  aws_logs as logs,
  aws_sns as sns,
  aws_sqs as sqs,
} from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { EMF_METRICS, EMF_NAMESPACE, EMF_PROCESSES, EmfProcess, LOG_FIELDS } from './observability';
import {
  DEFAULT_PREFIX,
  FUNCTION_NAMES,
  FunctionName,
  PARTITION_RCU_CEILING,
  PARTITION_WCU_CEILING,
  SHARD_RECORDS_CEILING,
  STREAMS,
  TABLES,
  TableSpec,
} from './schema';
import { ESM } from './esm';

/** `source` and `detail-type` of the sampler-report events routers publish (`heatsink::control::SAMPLER_SOURCE`). */
export const SAMPLER_SOURCE = 'heatsink.sampler';
export const SAMPLER_DETAIL_TYPE = 'heatsink hot-key report';

export type ContributorInsightsMode = 'ACCESSED_AND_THROTTLED_KEYS' | 'THROTTLED_KEYS';

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
  // Never concurrent with itself: one recount, one directory writer at a time.
  'count-rebuilder': 1,
  'hotkey-controller': 1,
};

export interface HeatsinkStackProps extends StackProps {
  /** Prefix of every table, stream, function, rule and alarm name (`HEATSINK_PREFIX`). */
  readonly prefix?: string;
  /** The deployment package of each function (prebuilt `bootstrap.zip`, or a placeholder in tests). */
  readonly code: (name: FunctionName) => lambda.Code;
  /** @default ARM_64 */
  readonly architecture?: lambda.Architecture;
  /** DynamoDB Contributor Insights mode on every table and GSI. @default ACCESSED_AND_THROTTLED_KEYS */
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
  /** Tables hotkey-controller watches (its grants follow). @default counters, read-hot */
  readonly controllerTables?: ControllerTable[];
}

interface InsightRuleRef {
  readonly name: string;
  readonly title: string;
  /** Per-second ceiling the rule's top contributor is compared with. */
  readonly ceiling: number;
}

/** CloudWatch dashboard widget showing a Contributor Insights rule's top contributors. */
class TopContributorsWidget implements cw.IWidget {
  public readonly width = 12;
  public readonly height = 6;
  public readonly warnings: string[] = [];
  private pos?: { x: number; y: number };

  constructor(
    private readonly ruleName: string,
    private readonly title: string,
  ) {}

  public position(x: number, y: number): void {
    this.pos = { x, y };
  }

  public toJson(): any[] {
    return [
      {
        type: 'metric',
        width: this.width,
        height: this.height,
        x: this.pos?.x,
        y: this.pos?.y,
        properties: {
          title: this.title,
          region: Aws.REGION,
          view: 'timeSeries',
          stacked: false,
          insightRule: { maxContributorCount: 10, orderBy: 'Sum', ruleName: this.ruleName },
          legend: { position: 'bottom' },
          period: 60,
        },
      },
    ];
  }
}

/**
 * heatsink: the five tables, the like-events stream, the four functions with their event sources,
 * Contributor Insights (DynamoDB's and heatsink's own log-based rules), alarms and a dashboard.
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

  constructor(scope: Construct, id: string, props: HeatsinkStackProps) {
    super(scope, id, props);
    const prefix = props.prefix ?? DEFAULT_PREFIX;
    const mode = props.contributorInsightsMode ?? 'ACCESSED_AND_THROTTLED_KEYS';
    const fraction = props.hotPartitionFraction ?? 0.8;
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    const architecture = props.architecture ?? lambda.Architecture.ARM_64;
    const likeEventsSource = props.likeEventsSource ?? ESM.source;
    if (!LIKE_EVENTS_SOURCES.includes(likeEventsSource)) {
      throw new Error(`likeEventsSource must be one of ${LIKE_EVENTS_SOURCES.join(', ')}, not ${likeEventsSource}`);
    }

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

    // ---- DynamoDB -----------------------------------------------------------------------------
    for (const spec of TABLES) {
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
        // Inherited by every GSI of the table (Replicas[].GlobalSecondaryIndexes[]).
        contributorInsightsSpecification: { enabled: true, mode: dynamodb.ContributorInsightsMode[mode] },
        globalSecondaryIndexes: spec.gsis.map((g) => ({
          indexName: g.name,
          partitionKey: attribute(g.partitionKey),
          sortKey: g.sortKey && attribute(g.sortKey),
          projectionType: dynamodb.ProjectionType.ALL,
        })),
        removalPolicy,
      });
    }
    const t = this.tables;
    const likeEvents = this.streams['like-events'];

    // ---- Alarm fan-out --------------------------------------------------------------------------
    // A customer-managed key: the AWS-managed alias/aws/sns key's policy cannot be changed to
    // let CloudWatch use it, and an alarm action to a topic CloudWatch cannot encrypt for fails.
    this.alarmKey = new kms.Key(this, 'AlarmKey', {
      alias: `alias/${prefix}alarms`,
      description: `${prefix}alarms SNS topic: CloudWatch alarms may encrypt messages to it`,
      enableKeyRotation: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.alarmKey.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsPublishEncrypted',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
      }),
    );
    this.alarmTopic = new sns.Topic(this, 'AlarmTopic', {
      topicName: `${prefix}alarms`,
      masterKey: this.alarmKey,
      enforceSSL: true,
    });
    this.alarmTopic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarms',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [this.alarmTopic.topicArn],
        conditions: { StringEquals: { 'aws:SourceAccount': Aws.ACCOUNT_ID } },
      }),
    );
    const failures = new sqs.Queue(this, 'StreamFailures', {
      queueName: `${prefix}stream-failures`,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(14),
    });
    Validations.of(failures).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SQS3',
      reason:
        'This queue is itself the on-failure destination of the stream event source mappings (it holds batch pointers for replay); it needs no DLQ of its own.',
    });
    // Failed asynchronous invocations (EventBridge -> count-rebuilder / hotkey-controller) and
    // events EventBridge could not deliver: nothing asynchronous is dropped silently.
    const asyncFailures = new sqs.Queue(this, 'AsyncFailures', {
      queueName: `${prefix}async-failures`,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(14),
    });
    Validations.of(asyncFailures).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SQS3',
      reason:
        'This queue is itself the on-failure destination of the asynchronous invocations and the EventBridge targets; it needs no DLQ of its own.',
    });
    const concurrency = { ...DEFAULT_CONCURRENCY, ...(props.concurrency ?? {}) };
    const controllerTables = props.controllerTables ?? [{ table: 'counters', kind: 'read' }];
    for (const c of controllerTables) {
      if (!TABLES.some((spec) => spec.logical === c.table)) throw new Error(`controllerTables: no table ${c.table}`);
    }

    // ---- Functions ------------------------------------------------------------------------------
    const settings: Record<FunctionName, { memory: number; timeout: number; description: string }> = {
      'likes-api': { memory: 256, timeout: 10, description: 'POST /posts/{post}/likes, GET /posts/{post}' },
      'likes-aggregator': { memory: 256, timeout: 60, description: 'like events -> pre-aggregated counter flushes' },
      'count-rebuilder': { memory: 512, timeout: 300, description: 'scheduled recount from durable likes; writes fix' },
      'hotkey-controller': { memory: 256, timeout: 60, description: 'Contributor Insights + alarms -> hot-key directory' },
    };
    const logGroups: logs.LogGroup[] = [];
    for (const name of FUNCTION_NAMES) {
      const functionName = `${prefix}${name}`;
      const logGroup = new logs.LogGroup(this, `Logs-${name}`, {
        logGroupName: `/aws/lambda/${functionName}`,
        retention: logs.RetentionDays.ONE_MONTH,
        removalPolicy: RemovalPolicy.DESTROY,
      });
      logGroups.push(logGroup);
      // Own role, no managed policy: logs go to this function's own group only.
      const role = new iam.Role(this, `Role-${name}`, {
        assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
        description: `${functionName}: least-privilege execution role`,
      });
      role.addToPolicy(
        new iam.PolicyStatement({
          actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
          resources: [logGroup.logGroupArn],
        }),
      );
      // Scheduled / event-driven functions: no async retries (the next trigger is the retry,
      // and concurrency 1 must not queue duplicates), failures to the async-failures queue.
      const isAsync = name === 'count-rebuilder' || name === 'hotkey-controller';
      const fn = new lambda.Function(this, `Fn-${name}`, {
        functionName,
        description: settings[name].description,
        runtime: lambda.Runtime.PROVIDED_AL2023,
        handler: 'bootstrap',
        architecture,
        code: props.code(name),
        memorySize: settings[name].memory,
        timeout: Duration.seconds(settings[name].timeout),
        role,
        logGroup,
        reservedConcurrentExecutions: concurrency[name],
        ...(isAsync
          ? {
              retryAttempts: 0,
              maxEventAge: Duration.minutes(name === 'count-rebuilder' ? 5 : 1),
              onFailure: new destinations.SqsDestination(asyncFailures),
            }
          : {}),
        environment: {
          HEATSINK_PREFIX: prefix,
          HEATSINK_CONTRIBUTOR_INSIGHTS_MODE: mode,
          RUST_LOG: 'info',
          // The capacity log: 1 call in 100, partition keys hashed except on tables keyed by
          // non-personal ids (`liked` is keyed by the user: hashed).
          HEATSINK_CAPACITY_LOG_SAMPLE: '100',
          HEATSINK_CAPACITY_LOG_CLEAR_TABLES: ['counters', 'hotkeys', 'posts', 'leases'].map((t) => `${prefix}${t}`).join(','),
          ...(name === 'hotkey-controller'
            ? { HEATSINK_CONTROLLER_TABLES: controllerTables.map((c) => `${prefix}${c.table}:${c.kind}`).join(',') }
            : {}),
          // Closed shards' counter sub-keys are folded; their tombstones are deleted after the
          // like-events source's retention (24 h, Kinesis and DynamoDB Streams alike), when no
          // record is left to replay.
          ...(name === 'count-rebuilder' ? { HEATSINK_COMPACT_GRACE_SECONDS: String(24 * 3600) } : {}),
        },
      });
      this.functions[name] = fn;
    }
    const f = this.functions;

    const insightRuleArn = (name: string) =>
      `arn:${Aws.PARTITION}:cloudwatch:${Aws.REGION}:${Aws.ACCOUNT_ID}:insight-rule/${name}`;

    // Every grant below is a call the function's code makes, and nothing else: infra/grants.json
    // lists the calls (recorded by the integration test tests/it/grants.rs through an SDK
    // interceptor), and test/grants.test.ts fails on a missing or an unused grant.
    // likes-api: durable like (conditional put), post lookup, count read, directory Scan.
    grant(f['likes-api'], t.liked, ['dynamodb:PutItem']);
    grant(f['likes-api'], t.posts, ['dynamodb:GetItem']);
    grant(f['likes-api'], t.counters, ['dynamodb:Query']);
    grant(f['likes-api'], t.hotkeys, ['dynamodb:Scan']);
    // likes-aggregator: reads the counters it flushes (BatchGetItem), conditional absolute flushes (PutItem).
    // ... and records each writer's flushed watermark (UpdateItem), what the repair is gated on.
    grant(f['likes-aggregator'], t.counters, ['dynamodb:BatchGetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem']);
    // count-rebuilder: exactly what `heatsink::counter::rebuild::Repair` calls: Query the
    // `touched` index and each counter and the watermarks, its lease and cursor (PutItem,
    // GetItem, DeleteItem), the bucket fixes (PutItem); COUNT Queries of `liked`'s `by-post`;
    // compaction of closed shards' sub-keys (TransactWriteItems of Updates: UpdateItem; the
    // tombstones' reap: DeleteItem).
    fnIndex(f['count-rebuilder'], t.liked, 'by-post', ['dynamodb:Query']);
    fnIndex(f['count-rebuilder'], t.counters, 'touched', ['dynamodb:Query']);
    grant(f['count-rebuilder'], t.counters, ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem']);
    // hotkey-controller: read the directory, write epoch-conditional changes.
    grant(f['hotkey-controller'], t.hotkeys, ['dynamodb:Scan', 'dynamodb:PutItem', 'dynamodb:DeleteItem']);
    // ... and the managed Contributor Insights rules of the tables it watches (no others).
    const watched = controllerTables.map((c) => TABLES.find((spec) => spec.logical === c.table)!);
    f['hotkey-controller'].addToRolePolicy(
      new iam.PolicyStatement({
        // DescribeTable lists a table's GSIs ...
        actions: ['dynamodb:DescribeTable'],
        resources: watched.map((spec) => t[spec.logical].tableArn),
      }),
    );
    f['hotkey-controller'].addToRolePolicy(
      new iam.PolicyStatement({
        // ... so every index's rules are read too.
        actions: ['dynamodb:DescribeContributorInsights'],
        resources: watched.flatMap((spec) => [
          t[spec.logical].tableArn,
          ...spec.gsis.map((g) => `${t[spec.logical].tableArn}/index/${g.name}`),
        ]),
      }),
    );
    // DynamoDB names its managed rules DynamoDBContributorInsights-{PKC,PKT,SKC,SKT}-<table>-<epoch ms>
    // (GSIs: <table>-<index>-<epoch ms>); the creation time is unknown at deploy time. The
    // controller reads the partition-key rules only (accessed and throttled keys).
    const managedRules = watched.flatMap((spec) =>
      ['PKC', 'PKT'].map((kind) => `DynamoDBContributorInsights-${kind}-${prefix}${spec.logical}-*`),
    );
    f['hotkey-controller'].addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['cloudwatch:GetInsightRuleReport'],
        resources: managedRules.map(insightRuleArn),
      }),
    );
    for (const rule of managedRules) {
      Validations.of(f['hotkey-controller'].role!).acknowledge({
        id: `AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:insight-rule/${rule}]`,
        reason:
          "DynamoDB's managed Contributor Insights rules end in a creation timestamp unknown at deploy time; the pattern names the rule kind and the watched table exactly, only the timestamp is a wildcard.",
      });
    }

    // ---- Event sources ----------------------------------------------------------------------------
    const streamSource = {
      startingPosition: lambda.StartingPosition.TRIM_HORIZON,
      batchSize: ESM.batchSize,
      maxBatchingWindow: Duration.seconds(ESM.windowSeconds),
      bisectBatchOnError: true,
      reportBatchItemFailures: true,
      parallelizationFactor: 1,
      retryAttempts: 10,
      maxRecordAge: Duration.hours(6),
      onFailure: new sources.SqsDlq(failures),
    };
    // Exactly one source: both carry the same changes of `liked`, two would count every like twice.
    // The event source grants read on that source only (no read permission on the unused one).
    f['likes-aggregator'].addEventSource(
      likeEventsSource === 'kinesis'
        ? new sources.KinesisEventSource(likeEvents, streamSource)
        : new sources.DynamoEventSource(t.liked, streamSource),
    );

    // EventBridge delivers asynchronously: 2 delivery retries within 10 minutes, then the event
    // goes to async-failures (the function's own async config has no retries, see above).
    const eventTarget = (fn: lambda.IFunction) =>
      new targets.LambdaFunction(fn, {
        retryAttempts: 2,
        maxEventAge: Duration.minutes(10),
        deadLetterQueue: asyncFailures,
      });
    new events.Rule(this, 'CountRebuilderSchedule', {
      ruleName: `${prefix}count-rebuilder-schedule`,
      schedule: events.Schedule.rate(Duration.minutes(5)),
      targets: [eventTarget(f['count-rebuilder'])],
    });
    new events.Rule(this, 'HotkeyControllerSchedule', {
      ruleName: `${prefix}hotkey-controller-schedule`,
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [eventTarget(f['hotkey-controller'])],
    });

    // ---- Control plane: a bus only the sampler publisher role may put on -----------------------
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
    const samplerReportsRule = `${prefix}hotkey-controller-sampler-reports`;
    new events.Rule(this, 'HotkeyControllerSamplerReports', {
      ruleName: samplerReportsRule,
      description: `heatsink sampler reports (${prefix}control bus) -> hotkey-controller`,
      eventBus: this.controlBus,
      eventPattern: {
        source: [SAMPLER_SOURCE],
        detailType: [SAMPLER_DETAIL_TYPE],
      },
      targets: [eventTarget(f['hotkey-controller'])],
    });
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
      retention: logs.RetentionDays.ONE_MONTH,
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
        issuer: `https://cognito-idp.${Aws.REGION}.amazonaws.com/${pool.userPoolId}`,
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
      accessLogSettings: { destination: new apigw.LogGroupLogDestination(accessLogs) },
    });
    const integration = new integrations.HttpLambdaIntegration('LikesApiIntegration', f['likes-api']);
    api.addRoutes({ path: '/posts/{post}/likes', methods: [apigw.HttpMethod.POST], integration, authorizer });
    api.addRoutes({ path: '/posts/{post}', methods: [apigw.HttpMethod.GET], integration, authorizer });
    new CfnOutput(this, 'LikesApiUrl', { value: stage.url });

    // ---- Contributor Insights rules over the functions' logs -------------------------------------
    // Literal names (not tokens) keep each rule body a plain JSON string in the template.
    const logGroupNames = FUNCTION_NAMES.map((name) => `/aws/lambda/${prefix}${name}`);
    const capacityRules: InsightRuleRef[] = [];
    const addCapacityRule = (table: TableSpec, index: string | undefined, unit: 'wcu' | 'rcu') => {
      const tableName = `${prefix}${table.logical}`;
      const name = `${prefix}${table.logical}${index ? `-${index}` : ''}-partition-${unit}`;
      const filters: object[] = [{ Match: `$.${LOG_FIELDS.table}`, In: [tableName] }];
      filters.push(
        index ? { Match: `$.${LOG_FIELDS.index}`, In: [index] } : { Match: `$.${LOG_FIELDS.index}`, IsPresent: false },
      );
      const rule = new cw.CfnInsightRule(this, `Insight-${table.logical}${index ? `-${index}` : ''}-${unit}`, {
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
      logGroups.forEach((g) => rule.node.addDependency(g));
      capacityRules.push({
        name,
        title: `${tableName}${index ? `/${index}` : ''} ${unit.toUpperCase()}/s, hottest partition key`,
        ceiling: unit === 'wcu' ? PARTITION_WCU_CEILING : PARTITION_RCU_CEILING,
      });
    };
    for (const table of TABLES) {
      for (const index of [undefined, ...table.gsis.map((g) => g.name)]) {
        addCapacityRule(table, index, 'wcu');
        addCapacityRule(table, index, 'rcu');
      }
    }


    // ---- Alarms -----------------------------------------------------------------------------------
    const emf = (
      metricName: string,
      emitter: FunctionName | EmfProcess,
      statistic = 'Maximum',
      label?: string,
      period = Duration.minutes(1),
    ) =>
      new cw.Metric({
        namespace: EMF_NAMESPACE,
        metricName,
        dimensionsMap: { Function: emitter },
        statistic,
        label,
        period,
      });
    // count-rebuilder runs every 5 minutes: its series have one datapoint per run.
    const perRun = Duration.minutes(5);
    const alarm = (id: string, alarmProps: cw.AlarmProps) => {
      const a = new cw.Alarm(this, id, alarmProps);
      a.addAlarmAction(new cwActions.SnsAction(this.alarmTopic));
      a.addOkAction(new cwActions.SnsAction(this.alarmTopic));
      this.alarms.push(a);
      return a;
    };
    const perSecond = (rule: InsightRuleRef) =>
      new cw.MathExpression({
        expression: `INSIGHT_RULE_METRIC('${rule.name}', 'MaxContributorValue') / 60`,
        usingMetrics: {},
        period: Duration.minutes(1),
        label: rule.title,
      });
    // Alarms whose state changes wake hotkey-controller: hot partitions and key-range throttles.
    const hotKeyAlarms: string[] = [];
    for (const rule of capacityRules) {
      hotKeyAlarms.push(`${rule.name}-hot`);
      alarm(`Hot-${rule.name}`, {
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
    const throttleTargets: { table: string; index?: string }[] = TABLES.flatMap((s) => [
      { table: `${prefix}${s.logical}` },
      ...s.gsis.map((g) => ({ table: `${prefix}${s.logical}`, index: g.name })),
    ]);
    const ddbMetric = (metricName: string, table: string, index?: string) =>
      new cw.Metric({
        namespace: 'AWS/DynamoDB',
        metricName,
        dimensionsMap: index ? { TableName: table, GlobalSecondaryIndexName: index } : { TableName: table },
        statistic: 'Sum',
        period: Duration.minutes(1),
      });
    const throttleReasons = {
      'key-range': ['ReadKeyRangeThroughputThrottleEvents', 'WriteKeyRangeThroughputThrottleEvents'],
      quota: [
        'ReadAccountLimitThrottleEvents',
        'WriteAccountLimitThrottleEvents',
        'ReadMaxOnDemandThroughputThrottleEvents',
        'WriteMaxOnDemandThroughputThrottleEvents',
      ],
    };
    for (const target of throttleTargets) {
      const label = `${target.table}${target.index ? `-${target.index}` : ''}`;
      for (const [reason, metricNames] of Object.entries(throttleReasons)) {
        const usingMetrics: Record<string, cw.IMetric> = {};
        metricNames.forEach((m, i) => (usingMetrics[`m${i}`] = ddbMetric(m, target.table, target.index)));
        alarm(`Throttle-${label}-${reason}`, {
          alarmName: `${label}-throttled-${reason}`,
          alarmDescription:
            reason === 'key-range'
              ? `${label}: requests throttled because one partition exceeded its key-range ceiling (hot key). Runbook: README "Alarms".`
              : `${label}: requests throttled by the account's per-table quota or the table's on-demand maximum. Runbook: README "Alarms".`,
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
        if (reason === 'key-range') hotKeyAlarms.push(`${label}-throttled-${reason}`);
      }
    }
    const iteratorAge = f['likes-aggregator'].metric('IteratorAge', {
      statistic: 'Maximum',
      period: Duration.minutes(1),
    });
    alarm('AggregatorIteratorAge', {
      alarmName: `${prefix}likes-aggregator-iterator-age`,
      alarmDescription: 'likes-aggregator is more than 60 s behind its event source. Runbook: README "Alarms".',
      metric: iteratorAge,
      threshold: 60_000,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    alarm('StreamWriteThrottled', {
      alarmName: `${prefix}like-events-write-throttled`,
      alarmDescription: 'Puts to like-events exceeded a shard\'s 1,000 records/s or 1 MB/s. Runbook: README "Alarms".',
      metric: likeEvents.metricPutRecordsThrottledRecords({ statistic: 'Sum', period: Duration.minutes(1) }),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 3,
      datapointsToAlarm: 2,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    alarm('StreamFailuresVisible', {
      alarmName: `${prefix}stream-failures`,
      alarmDescription: 'Stream batches were given up on and parked in the stream-failures queue. Runbook: README "Alarms".',
      metric: failures.metricApproximateNumberOfMessagesVisible({ statistic: 'Maximum', period: Duration.minutes(1) }),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    alarm('AsyncFailuresVisible', {
      alarmName: `${prefix}async-failures`,
      alarmDescription:
        'A count-rebuilder or hotkey-controller invocation failed (no retries), or EventBridge could not deliver to it. Runbook: README "Alarms".',
      metric: asyncFailures.metricApproximateNumberOfMessagesVisible({ statistic: 'Maximum', period: Duration.minutes(1) }),
      threshold: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    // Every function: unhandled errors and throttles (reserved concurrency reached).
    for (const name of FUNCTION_NAMES) {
      alarm(`Errors-${name}`, {
        alarmName: `${prefix}${name}-errors`,
        alarmDescription: `${prefix}${name} failed invocations (Lambda Errors). Runbook: README "Alarms".`,
        metric: f[name].metricErrors({ statistic: 'Sum', period: Duration.minutes(5) }),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
      alarm(`Throttles-${name}`, {
        alarmName: `${prefix}${name}-throttles`,
        alarmDescription: `${prefix}${name} invocations throttled at its reserved concurrency (${concurrency[name]}). Runbook: README "Alarms".`,
        metric: f[name].metricThrottles({ statistic: 'Sum', period: Duration.minutes(5) }),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
    }
    // Heartbeats: the scheduled functions emit these after every successful run (0s included),
    // so no datapoint means the function stopped running or stopped succeeding.
    const heartbeats: { id: string; metric: string; emitter: FunctionName; every: Duration; runs: string }[] = [
      { id: 'HeartbeatController', metric: EMF_METRICS.hotKeys, emitter: 'hotkey-controller', every: Duration.minutes(5), runs: 'every minute' },
      { id: 'HeartbeatRebuilder', metric: EMF_METRICS.rebuildCompleted, emitter: 'count-rebuilder', every: Duration.minutes(15), runs: 'every 5 minutes' },
    ];
    for (const hb of heartbeats) {
      alarm(hb.id, {
        alarmName: `${prefix}${hb.emitter}-heartbeat`,
        alarmDescription: `${prefix}${hb.emitter} runs ${hb.runs} and emits ${hb.metric} each time; none for ${hb.every.toMinutes()} minutes. Runbook: README "Alarms".`,
        metric: emf(hb.metric, hb.emitter, 'SampleCount', undefined, hb.every),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cw.TreatMissingData.BREACHING,
      });
    }
    // The HTTP API: server errors and p99 latency.
    alarm('Api5xx', {
      alarmName: `${prefix}likes-api-5xx`,
      alarmDescription: 'The likes HTTP API answered 5xx (likes-api failed or timed out). Runbook: README "Alarms".',
      metric: api.metricServerError({ statistic: 'Sum', period: Duration.minutes(1) }),
      threshold: 5,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 3,
      datapointsToAlarm: 2,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    alarm('ApiLatencyP99', {
      alarmName: `${prefix}likes-api-p99-latency`,
      alarmDescription: 'p99 latency of the likes HTTP API is above 1 s. Runbook: README "Alarms".',
      metric: api.metricLatency({ statistic: 'p99', period: Duration.minutes(1) }),
      threshold: 1000,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    if (likeEventsSource === 'kinesis') {
      // The Kinesis streaming destination: how far behind the table's changes the copy is.
      // AgeOfOldestUnreplicatedRecord (AWS/DynamoDB, ms since the oldest change not yet copied to
      // the stream first appeared in the table) is the replication lag DynamoDB publishes for
      // Kinesis Data Streams for DynamoDB (DynamoDB Developer Guide, "Configuring shards and
      // monitoring change data capture with Kinesis Data Streams in DynamoDB"; CloudWatch's
      // recommended DynamoDB alarms, which list its dimensions as TableName and
      // DelegatedOperation: see infra/terraform/alarms.tf for the open check).
      alarm('ReplicationLag', {
        alarmName: `${prefix}liked-kinesis-replication-lag`,
        alarmDescription: `${prefix}liked changes are more than 60 s old before reaching ${prefix}like-events. Runbook: README "Alarms".`,
        metric: new cw.Metric({
          namespace: 'AWS/DynamoDB',
          metricName: 'AgeOfOldestUnreplicatedRecord',
          dimensionsMap: { TableName: `${prefix}liked` },
          statistic: 'Maximum',
          period: Duration.minutes(1),
        }),
        threshold: 60_000,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 5,
        datapointsToAlarm: 3,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
      alarm('ReplicationFailed', {
        alarmName: `${prefix}liked-kinesis-replication-failed`,
        alarmDescription: `DynamoDB failed to copy ${prefix}liked changes to ${prefix}like-events. Runbook: README "Alarms".`,
        metric: new cw.Metric({
          namespace: 'AWS/DynamoDB',
          metricName: 'FailedToReplicateRecordCount',
          dimensionsMap: { TableName: `${prefix}liked` },
          statistic: 'Sum',
          period: Duration.minutes(1),
        }),
        threshold: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
      alarm('StreamIteratorAge', {
        alarmName: `${prefix}like-events-iterator-age`,
        alarmDescription: `Readers of ${prefix}like-events are more than 60 s behind (GetRecords.IteratorAgeMilliseconds). Runbook: README "Alarms".`,
        metric: likeEvents.metricGetRecordsIteratorAgeMilliseconds({ statistic: 'Maximum', period: Duration.minutes(1) }),
        threshold: 60_000,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 5,
        datapointsToAlarm: 3,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
    }

    // Alarm state changes of exactly the hot-key alarms above wake the controller (names, not a
    // prefix: `heatsink-` would also match `heatsink-staging-`).
    new events.Rule(this, 'HotkeyControllerAlarms', {
      ruleName: `${prefix}hotkey-controller-alarms`,
      description: 'heatsink hot-key alarm state changes -> hotkey-controller',
      eventPattern: {
        source: ['aws.cloudwatch'],
        detailType: ['CloudWatch Alarm State Change'],
        // Exact names (an event pattern holds at most 2,048 characters: names, not ARNs).
        detail: { alarmName: hotKeyAlarms },
      },
      targets: [eventTarget(f['hotkey-controller'])],
    });

    // Any correction means likes were lost or applied twice between `liked` and `counters`, and
    // the rebuilder repaired the counts (counts are eventually exact and the gap is observable;
    // see docs/counters.md).
    alarm('CounterCorrections', {
      alarmName: `${prefix}counter-corrections`,
      alarmDescription:
        'count-rebuilder corrected counters: likes were lost or applied twice upstream of counters (a lost batch, an aggregator fault); the counts are repaired. Runbook: README "Alarms".',
      // No label: a labelled metric would synthesize as a one-query metric-math alarm.
      metric: emf(EMF_METRICS.counterCorrection, 'count-rebuilder', 'Sum', undefined, perRun),
      threshold: 0,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });

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
    dashboard.addWidgets(
      ...capacityRules.map(
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
    dashboard.addWidgets(
      ...capacityRules.map((rule) => new TopContributorsWidget(rule.name, `Top contributors: ${rule.title}`)),
    );
    dashboard.addWidgets(
      ...throttleTargets.map(
        (target) =>
          new cw.GraphWidget({
            title: `Throttles by reason: ${target.table}${target.index ? `/${target.index}` : ''}`,
            left: [...throttleReasons['key-range'], ...throttleReasons.quota, 'ReadProvisionedThroughputThrottleEvents', 'WriteProvisionedThroughputThrottleEvents'].map(
              (m) => ddbMetric(m, target.table, target.index).with({ label: m.replace('ThrottleEvents', '') }),
            ),
            stacked: true,
            width: 8,
            height: 6,
          }),
      ),
    );
    // EventBridge's own count of the sampler reports this rule matched (RuleName alone: the
    // default bus), i.e. what routers delivered; no function emits a metric for them.
    const samplerReportsMatched = new cw.Metric({
      namespace: 'AWS/Events',
      metricName: 'MatchedEvents',
      dimensionsMap: { RuleName: samplerReportsRule },
      statistic: 'Sum',
      label: 'sampler reports delivered',
      period: Duration.minutes(1),
    });
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Counter lag (events applied, not yet flushed) and flush delay',
        left: [emf(EMF_METRICS.counterLag, 'likes-aggregator')],
        right: [emf(EMF_METRICS.counterFlushDelay, 'likes-aggregator')],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'Stream iterator age (ms)',
        left: [
          iteratorAge.with({ label: 'likes-aggregator IteratorAge' }),
          likeEvents.metricGetRecordsIteratorAgeMilliseconds({ statistic: 'Maximum', period: Duration.minutes(1) }),
        ],
        leftAnnotations: [{ value: 60_000, label: 'alarm' }],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'Stream consumer leases (heatsink tail --emf or an embedding service)',
        left: [
          emf(EMF_METRICS.leasesHeld, EMF_PROCESSES.streamConsumer, 'Maximum', 'held (max per worker)'),
          emf(EMF_METRICS.leasesExpired, EMF_PROCESSES.streamConsumer, 'Sum', 'expired, taken over'),
        ],
        width: 8,
        height: 6,
      }),
    );
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Hot keys: directory vs sampler reports delivered',
        left: [emf(EMF_METRICS.hotKeys, 'hotkey-controller', 'Maximum', 'keys in the directory')],
        right: [samplerReportsMatched],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'Admission: 429s from likes-api',
        left: [emf(EMF_METRICS.admissionRejected, 'likes-api', 'Sum')],
        width: 8,
        height: 6,
      }),
      new cw.GraphWidget({
        title: 'like-events: incoming records vs shard ceiling (the table\'s streaming destination)',
        left: [likeEvents.metricIncomingRecords({ statistic: 'Sum', period: Duration.minutes(1) })],
        leftAnnotations: [
          { value: SHARD_RECORDS_CEILING * 60 * STREAMS[0].shards, label: 'all shards, records/min' },
        ],
        width: 8,
        height: 6,
      }),
    );
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Counter corrections (count-rebuilder)',
        left: [
          emf(EMF_METRICS.counterCorrection, 'count-rebuilder', 'Sum', 'likes corrected', perRun),
          emf(EMF_METRICS.countersCorrected, 'count-rebuilder', 'Sum', 'counters corrected', perRun),
        ],
        right: [
          emf(EMF_METRICS.countersUnsettled, 'count-rebuilder', 'Maximum', 'counters unsettled', perRun),
          emf(EMF_METRICS.rebuildCompleted, 'count-rebuilder', 'Sum', 'runs completed', perRun),
        ],
        period: perRun,
        width: 8,
        height: 6,
      }),
    );
    dashboard.addWidgets(
      new cw.AlarmStatusWidget({ title: 'heatsink alarms', alarms: this.alarms, width: 24, height: 8 }),
    );
  }
}

function attribute(a: { name: string; type: 'S' | 'N' | 'B' }): dynamodb.Attribute {
  const type = { S: dynamodb.AttributeType.STRING, N: dynamodb.AttributeType.NUMBER, B: dynamodb.AttributeType.BINARY }[
    a.type
  ];
  return { name: a.name, type };
}

/** Explicit data-plane actions on one table (never its indexes unless a call names one), never `dynamodb:*`. */
function grant(fn: lambda.Function, table: dynamodb.TableV2, actions: string[]): void {
  fn.addToRolePolicy(new iam.PolicyStatement({ actions, resources: [table.tableArn] }));
}

/** `actions` on one index of `table` only. */
function fnIndex(fn: lambda.Function, table: dynamodb.TableV2, index: string, actions: string[]): void {
  fn.addToRolePolicy(new iam.PolicyStatement({ actions, resources: [`${table.tableArn}/index/${index}`] }));
}

/**
 * What every heatsink block shares: a function with its own log group and least-privilege role,
 * failure queues, alarms that page a topic, and metric helpers. Internal to the blocks; the public
 * surface is `lib/index.ts`.
 */
import {
  Aws,
  CfnResource,
  Duration,
  RemovalPolicy,
  Stack,
  Token,
  Validations,
  aws_cloudwatch as cw,
  aws_cloudwatch_actions as cwActions,
  aws_iam as iam,
  aws_kms as kms,
  aws_lambda as lambda,
  aws_logs as logs,
  aws_sns as sns,
  aws_sqs as sqs,
} from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { EMF_NAMESPACE } from '../observability';

/**
 * The function binaries `make lambdas` builds (`functions/<name>/`): the photo app's five and
 * the slot directory's autopilot (`DirectoryAutopilot`, a block of its own).
 */
export type HeatsinkBinary =
  | 'likes-api'
  | 'likes-aggregator'
  | 'count-rebuilder'
  | 'hotkey-controller'
  | 'autopilot'
  | 'directory-autopilot';

/** Where each function's deployment package comes from (a prebuilt `bootstrap.zip`, or a placeholder in tests). */
export type CodeSource = (binary: HeatsinkBinary) => lambda.Code;

/**
 * X-Ray tracing of the functions. `PassThrough` (the default) records a trace only for an
 * invocation whose caller sampled one, so it costs nothing on the hot paths; `Active` samples
 * every function (1 request/s plus 5 % per function: at 10,000 likes/s about 500 traces/s,
 * roughly $6,500 a month at $5 per million traces).
 */
export type TracingMode = 'PassThrough' | 'Active';

/** Settings every block's functions share. */
export interface FunctionDefaults {
  /** The deployment package of each function. */
  readonly code: CodeSource;
  /** @default ARM_64 */
  readonly architecture?: lambda.Architecture;
  /** @default 'PassThrough' */
  readonly tracing?: TracingMode;
  /**
   * Retention of the functions' log groups. 30 days by default: long enough to investigate an
   * alarm, short enough to keep little (the capacity log hashes user-keyed partition keys).
   * @default ONE_MONTH
   */
  readonly logRetention?: logs.RetentionDays;
  /** Extra environment variables for every function of the block (e.g. the capacity log's settings). */
  readonly environment?: Record<string, string>;
}

export interface HeatsinkFunctionProps extends FunctionDefaults {
  readonly functionName: string;
  readonly binary: HeatsinkBinary;
  readonly description: string;
  readonly memory: number;
  readonly timeout: Duration;
  readonly reservedConcurrency: number;
  readonly variables: Record<string, string>;
  /**
   * Actions besides X-Ray's that the block grants on `"*"` because they support no resource-level
   * permission (e.g. `cloudwatch:GetMetricData`): named in the role's IAM5 acknowledgement.
   * @default none
   */
  readonly starResourceActions?: string[];
}

/**
 * One heatsink function: its own log group (retained for `logRetention`), its own role (no
 * managed policy; it may write to its own log group only until a block grants more) and the
 * function. The function depends on the role's policy only (the role itself is a `GetAtt`).
 */
export class HeatsinkFunction extends Construct {
  public readonly fn: lambda.Function;
  public readonly role: iam.Role;
  public readonly logGroup: logs.LogGroup;

  constructor(scope: Construct, id: string, props: HeatsinkFunctionProps) {
    super(scope, id);
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      logGroupName: `/aws/lambda/${props.functionName}`,
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `${props.functionName}: least-privilege execution role`,
    });
    this.role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [this.logGroup.logGroupArn],
      }),
    );
    this.fn = new lambda.Function(this, 'Function', {
      functionName: props.functionName,
      description: props.description,
      runtime: lambda.Runtime.PROVIDED_AL2023,
      handler: 'bootstrap',
      architecture: props.architecture ?? lambda.Architecture.ARM_64,
      code: props.code(props.binary),
      memorySize: props.memory,
      timeout: props.timeout,
      role: this.role,
      logGroup: this.logGroup,
      reservedConcurrentExecutions: props.reservedConcurrency,
      // The Lambda service sends the function's segments as the role: xray:PutTraceSegments and
      // PutTelemetryRecords, which take no resource ("*", the only such grant).
      tracing: props.tracing === 'Active' ? lambda.Tracing.ACTIVE : lambda.Tracing.PASS_THROUGH,
      environment: { ...props.variables, ...(props.environment ?? {}) },
    });
    const star = props.starResourceActions ?? [];
    Validations.of(this.role).acknowledge({
      id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
      reason:
        'xray:PutTraceSegments and xray:PutTelemetryRecords, which the Lambda service calls as the role to send the function\'s trace segments, support no resource-level permissions: "*" is the only resource they take.' +
        (star.length ? ` So does ${star.join(' and ')}, which the function calls: "*" is its only resource too.` : ''),
    });
    // The function needs its policy in place before it runs (event source mappings check it);
    // the role itself is already ordered by the `GetAtt` of its ARN (cfn-lint W3005).
    const policy = this.role.node.tryFindChild('DefaultPolicy')?.node.defaultChild as CfnResource;
    (this.fn.node.defaultChild as CfnResource).addOverride('DependsOn', [Stack.of(this).getLogicalId(policy)]);
  }

  /** Grants `actions` on `resources` (explicit data-plane actions, never `*`). */
  public grant(actions: string[], resources: string[]): void {
    this.role.addToPolicy(new iam.PolicyStatement({ actions, resources }));
  }
}

/**
 * An SQS queue that parks failures (stream batch pointers, failed invocations with their event,
 * events EventBridge could not deliver): TLS only, kept 14 days, encrypted with a key of its own
 * (`alias/<queue name>`, rotated): EventBridge can park events only in a queue whose key lets it
 * encrypt, which an AWS-managed key never does. The key lets `events.amazonaws.com` of this
 * account encrypt; the functions that park failures get `kms:GenerateDataKey` and `kms:Decrypt` on
 * it with their send grants.
 */
export function failureQueue(scope: Construct, id: string, queueName: string): sqs.Queue {
  const key = new kms.Key(scope, `${id}Key`, {
    alias: `alias/${queueName}`,
    description: `${queueName}: failures parked by Lambda and EventBridge`,
    enableKeyRotation: true,
    removalPolicy: RemovalPolicy.RETAIN,
  });
  key.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'EventBridgeParksEvents',
      principals: [new iam.ServicePrincipal('events.amazonaws.com')],
      actions: ['kms:Decrypt', 'kms:GenerateDataKey'],
      resources: ['*'],
      conditions: { StringEquals: { 'aws:SourceAccount': Aws.ACCOUNT_ID } },
    }),
  );
  return new sqs.Queue(scope, id, {
    queueName,
    encryption: sqs.QueueEncryption.KMS,
    encryptionMasterKey: key,
    enforceSSL: true,
    retentionPeriod: Duration.days(14),
  });
}

/** The calls a function's role needs to park a failure in `queue` (the Lambda service sends as the role). */
export function grantFailureDestination(fn: HeatsinkFunction, queue: sqs.IQueue): void {
  fn.grant(['sqs:SendMessage', 'sqs:GetQueueAttributes', 'sqs:GetQueueUrl'], [queue.queueArn]);
  if (queue.encryptionMasterKey) {
    fn.grant(['kms:GenerateDataKey', 'kms:Decrypt'], [queue.encryptionMasterKey.keyArn]);
  }
}

/** An on-failure destination (async invocations) granting exactly what the send needs. */
export class QueueDestination implements lambda.IDestination {
  constructor(
    private readonly queue: sqs.IQueue,
    private readonly owner: HeatsinkFunction,
  ) {}
  public bind(): lambda.DestinationConfig {
    grantFailureDestination(this.owner, this.queue);
    return { destination: this.queue.queueArn };
  }
}

/** An event source mapping's on-failure destination granting exactly what the send needs. */
export class QueueDlq implements lambda.IEventSourceDlq {
  constructor(
    private readonly queue: sqs.IQueue,
    private readonly owner: HeatsinkFunction,
  ) {}
  public bind(): lambda.DlqDestinationConfig {
    grantFailureDestination(this.owner, this.queue);
    return { destination: this.queue.queueArn };
  }
}

/** Creates alarms that notify `topic` (when given) on ALARM and OK, and keeps them in `list`. */
export class AlarmFactory {
  public readonly alarms: cw.Alarm[] = [];
  constructor(
    private readonly scope: Construct,
    private readonly topic?: sns.ITopic,
  ) {}
  public alarm(id: string, props: cw.AlarmProps): cw.Alarm {
    const a = new cw.Alarm(this.scope, id, props);
    if (this.topic) {
      a.addAlarmAction(new cwActions.SnsAction(this.topic));
      a.addOkAction(new cwActions.SnsAction(this.topic));
    }
    this.alarms.push(a);
    return a;
  }
}

/** A heatsink EMF metric (namespace `heatsink`, dimension `Function` = its one emitter). */
export function emfMetric(
  metricName: string,
  emitter: string,
  statistic = 'Maximum',
  label?: string,
  period = Duration.minutes(1),
): cw.Metric {
  return new cw.Metric({ namespace: EMF_NAMESPACE, metricName, dimensionsMap: { Function: emitter }, statistic, label, period });
}

/** A DynamoDB metric of a table or one of its GSIs. */
export function ddbMetric(metricName: string, table: string, index?: string, statistic = 'Sum'): cw.Metric {
  return new cw.Metric({
    namespace: 'AWS/DynamoDB',
    metricName,
    dimensionsMap: index ? { TableName: table, GlobalSecondaryIndexName: index } : { TableName: table },
    statistic,
    period: Duration.minutes(1),
  });
}

/** ARN of a CloudWatch Contributor Insights rule of this account and region. */
export function insightRuleArn(name: string): string {
  return `arn:${Aws.PARTITION}:cloudwatch:${Aws.REGION}:${Aws.ACCOUNT_ID}:insight-rule/${name}`;
}

/** CloudWatch dashboard widget showing a Contributor Insights rule's top contributors. */
export class TopContributorsWidget implements cw.IWidget {
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
 * The fixed name of a table or stream, for alarm and rule names (which must be plain strings so
 * event patterns and runbooks can name them): `explicit` when given, else the name the resource
 * was created or imported with.
 */
export function literalName(resource: object, explicit: string | undefined, what: string): string {
  const r = resource as { physicalName?: unknown; tableName?: unknown; streamName?: unknown };
  for (const c of [explicit, r.physicalName, r.tableName, r.streamName]) {
    if (typeof c === 'string' && !Token.isUnresolved(c)) return c;
  }
  throw new Error(`${what}: create or import it with a fixed name (alarm and rule names are built from it)`);
}

#!/usr/bin/env node
/**
 * Protect your own table: a team's `orders` table, counted by `customer`, with the hot-key guard
 * on it. Nothing here is the photo app: the blocks take your table and its stream.
 *
 * `orders` is keyed by `order_id`; each order also carries `customer`, `ordered_at` (Unix ms) and
 * `customer_shard` (`<customer>#<n>`, n in 0..16, spread by the writer), which the repair's
 * write-sharded index `by-customer` needs. The counter keeps `orders#<customer>` in
 * `orders-counters` from the table's own stream; the guard watches `orders`, its index and the
 * counters (Contributor Insights, throttle and hot-partition alarms), and its controller names hot
 * customers whose count is read hot, for readers using the hot-key directory.
 *
 *   npx cdk synth --app "npx ts-node --prefer-ts-exts examples/orders.ts" -c heatsink:placeholderCode=true
 *
 * (`make lambdas` builds the functions; without it, placeholder code lets the template be checked.)
 */
import { App, Duration, RemovalPolicy, Stack, StackProps, Validations, aws_dynamodb as dynamodb, aws_lambda as lambda } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { Construct } from 'constructs';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { AlarmTopic, CodeSource, HotKeyCounter, HotKeyGuard } from '../lib';

export interface OrdersStackProps extends StackProps {
  /** Where each function's `bootstrap.zip` comes from. */
  readonly code: CodeSource;
}

export class OrdersStack extends Stack {
  public readonly orders: dynamodb.TableV2;
  public readonly counter: HotKeyCounter;
  public readonly guard: HotKeyGuard;

  constructor(scope: Construct, id: string, props: OrdersStackProps) {
    super(scope, id, props);
    // The team's own table (not heatsink's): its stream feeds the counter.
    this.orders = new dynamodb.TableV2(this, 'Orders', {
      tableName: 'orders',
      partitionKey: { name: 'order_id', type: dynamodb.AttributeType.STRING },
      billing: dynamodb.Billing.onDemand(),
      dynamoStream: dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      deletionProtection: true,
      globalSecondaryIndexes: [
        {
          indexName: 'by-customer',
          partitionKey: { name: 'customer_shard', type: dynamodb.AttributeType.STRING },
          sortKey: { name: 'ordered_at', type: dynamodb.AttributeType.NUMBER },
          projectionType: dynamodb.ProjectionType.KEYS_ONLY,
        },
      ],
      removalPolicy: RemovalPolicy.RETAIN,
    });

    const alarms = new AlarmTopic(this, 'Alarms', { topicName: 'orders-alarms' });
    this.counter = new HotKeyCounter(this, 'OrdersPerCustomer', {
      prefix: 'orders-',
      code: props.code,
      table: this.orders,
      countBy: 'customer',
      counter: 'orders',
      timeAttribute: 'ordered_at',
      source: { kind: 'dynamodb-streams', table: this.orders },
      batching: { batchSize: 1000, windowSeconds: 3 },
      alarmTopic: alarms.topic,
      compactGrace: Duration.hours(24),
    });
    this.guard = new HotKeyGuard(this, 'Guard', {
      prefix: 'orders-',
      code: props.code,
      tables: [
        { table: this.orders, indexes: ['by-customer'] },
        // A hot customer's count is read on every page: the controller marks it read-hot.
        { table: this.counter.countersTable, indexes: ['touched'], hot: 'read' },
      ],
      capacityLogGroups: [this.counter.aggregator.logGroup, this.counter.rebuilder.logGroup],
      alarmTopic: alarms.topic,
    });
  }
}

/** Prebuilt `bootstrap.zip`s (`make lambdas`), or a placeholder when asked (template checks only). */
export function codeFrom(lambdaDir: string, placeholder: boolean): CodeSource {
  let dir: string | undefined;
  return (binary) => {
    const zip = path.join(lambdaDir, binary, 'bootstrap.zip');
    if (fs.existsSync(zip)) return lambda.Code.fromAsset(zip);
    if (!placeholder) throw new Error(`${zip} is missing: run \`make lambdas\` first`);
    if (!dir) {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'orders-placeholder-'));
      fs.writeFileSync(path.join(dir, 'bootstrap'), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
    }
    return lambda.Code.fromAsset(dir);
  };
}

if (require.main === module) {
  const app = new App();
  const lambdaDir = app.node.tryGetContext('heatsink:lambdaDir') ?? path.resolve(__dirname, '..', '..', '..', 'target', 'lambda');
  new OrdersStack(app, 'Orders', {
    code: codeFrom(lambdaDir, String(app.node.tryGetContext('heatsink:placeholderCode')) === 'true'),
  });
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));
}

/**
 * The "protect your own table" example (examples/orders.ts): a user's `orders` table counted by
 * `customer`, the hot-key guard on it. It synthesizes with cdk-nag clean, its roles hold exactly
 * the functions' calls under its own names (infra/grants.json `examples.orders`), and the blocks
 * are configured from its table, not the photo app's.
 */
import { App, Duration, Stack, Validations, aws_dynamodb as dynamodb } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import * as fs from 'fs';
import * as path from 'path';
import { OrdersStack } from '../examples/orders';
import { PlacesStack } from '../examples/places';
import { DirectoryAutopilot, DirectoryAutopilotProps } from '../lib';
import { expected, granted, manifest } from './grants-contract';
import { placeholderCode } from './helpers';

const example = manifest.examples.orders;
let app: App;
let t: Template;
beforeAll(() => {
  app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new OrdersStack(app, 'Orders', { code: () => placeholderCode() });
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  t = Template.fromStack(stack);
});

test('AwsSolutions checks pass on the example', () => {
  const report = JSON.parse(fs.readFileSync(path.join(app.synth().directory, 'validation-report.json'), 'utf8'));
  const pack = report.pluginReports.find((r: any) => r.pluginName === 'AwsSolutions');
  expect(pack.conclusion).toBe('success');
  expect(pack.violations).toEqual([]);
});

test.each(example.functions)('grants are the calls: %s', (fn) => {
  const want = expected(fn, example.source!, example);
  const have = granted(t, fn, example.prefix);
  expect({ missing: want.filter((g) => !have.includes(g)), unused: have.filter((g) => !want.includes(g)) }).toEqual({
    missing: [],
    unused: [],
  });
});

test('the example deploys the blocks only: no likes API, no photo-app table', () => {
  const functions = Object.values(t.findResources('AWS::Lambda::Function')).map((f) => f.Properties.FunctionName).sort();
  expect(functions).toEqual(example.functions.map((f) => `${example.prefix}${f}`).sort());
  const tables = Object.values(t.findResources('AWS::DynamoDB::GlobalTable')).map((r) => r.Properties.TableName).sort();
  expect(tables).toEqual(['orders', 'orders-counters', 'orders-hotkeys']);
  t.resourceCountIs('AWS::ApiGatewayV2::Api', 0);
});

test('the counter counts orders per customer from the table\'s own stream', () => {
  const env = (name: string) =>
    Object.values(t.findResources('AWS::Lambda::Function')).find((f) => f.Properties.FunctionName === `orders-${name}`)!.Properties
      .Environment.Variables;
  for (const fn of ['likes-aggregator', 'count-rebuilder']) {
    expect(env(fn)).toMatchObject({
      HEATSINK_COUNTER: 'orders',
      HEATSINK_COUNT_BY: 'customer',
      HEATSINK_EVENTS_TABLE: 'orders',
      HEATSINK_EVENT_TIME_ATTRIBUTE: 'ordered_at',
      HEATSINK_COUNTERS_TABLE: 'orders-counters',
    });
  }
  expect(env('hotkey-controller').HEATSINK_CONTROLLER_TABLES).toBe('orders-counters:read');
  const [mapping] = Object.values(t.findResources('AWS::Lambda::EventSourceMapping'));
  const ordersId = Object.entries(t.findResources('AWS::DynamoDB::GlobalTable')).find(([, r]) => r.Properties.TableName === 'orders')![0];
  expect(mapping.Properties.EventSourceArn).toEqual({ 'Fn::GetAtt': [ordersId, 'StreamArn'] });
});

test('the guard sets Contributor Insights on the user\'s table, its index and the counters', () => {
  const replica = (name: string) =>
    Object.values(t.findResources('AWS::DynamoDB::GlobalTable')).find((r) => r.Properties.TableName === name)!.Properties.Replicas[0];
  expect(replica('orders').ContributorInsightsSpecification).toEqual({ Enabled: true, Mode: 'THROTTLED_KEYS' });
  expect(replica('orders').GlobalSecondaryIndexes).toEqual([
    { IndexName: 'by-customer', ContributorInsightsSpecification: { Enabled: true, Mode: 'THROTTLED_KEYS' } },
  ]);
  // The controller reads the accessed-keys rules of the table it acts on.
  expect(replica('orders-counters').ContributorInsightsSpecification).toEqual({ Enabled: true, Mode: 'ACCESSED_AND_THROTTLED_KEYS' });
  const alarms = Object.values(t.findResources('AWS::CloudWatch::Alarm')).map((a) => a.Properties.AlarmName);
  expect(alarms).toEqual(expect.arrayContaining(['orders-throttled-key-range', 'orders-by-customer-throttled-key-range', 'orders-partition-wcu-hot']));
});

/**
 * The directory autopilot's example (examples/places.ts): a team's geohash `places` slot directory
 * over two owner tables and a spare, the `DirectoryAutopilot` block on it. It synthesizes with
 * cdk-nag clean in both settings of the act switch; its role holds exactly the function's calls
 * under the example's names (infra/grants.json `examples.places`: `table/owner` is each of
 * places-a, places-b and places-c), without the `act` entries by default, and the switch adds
 * exactly those.
 */
describe('the places example (DirectoryAutopilot)', () => {
  const places = manifest.examples.places;
  const fn = 'directory-autopilot';
  const build = (act: boolean) => {
    const a = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const stack = new PlacesStack(a, 'Places', { code: () => placeholderCode(), act });
    Validations.of(a).addPlugins(new AwsSolutionsChecks(a));
    return { app: a, t: Template.fromStack(stack) };
  };
  let off: { app: App; t: Template };
  let on: { app: App; t: Template };
  beforeAll(() => {
    off = build(false);
    on = build(true);
  });
  const fnProps = (tt: Template) =>
    Object.values(tt.findResources('AWS::Lambda::Function')).find((f) => f.Properties.FunctionName === 'places-directory-autopilot')!
      .Properties;
  const diff = (want: string[], have: string[]) => ({
    missing: want.filter((g) => !have.includes(g)),
    unused: have.filter((g) => !want.includes(g)),
  });

  test.each([false, true])('AwsSolutions checks pass on the example (act %s)', (act) => {
    const report = JSON.parse(fs.readFileSync(path.join((act ? on : off).app.synth().directory, 'validation-report.json'), 'utf8'));
    const pack = report.pluginReports.find((r: any) => r.pluginName === 'AwsSolutions');
    expect(pack.conclusion).toBe('success');
    expect(pack.violations).toEqual([]);
  });

  test('the manifest lists the example', () => {
    expect(places.functions).toEqual([fn]);
    expect(places.rename_each).toEqual({ 'table/owner': ['table/a', 'table/b', 'table/c'] });
  });

  test('grants are the calls: a dry run holds exactly the entries without act (and platform)', () => {
    const want = expected(fn, 'kinesis', places, false);
    expect(want).toContain('dynamodb:Query table/slots');
    expect(want).not.toContain('dynamodb:DescribeTable table/c'); // the mover's, granted only to act
    expect(diff(want, granted(off.t, fn, places.prefix))).toEqual({ missing: [], unused: [] });
  });

  test('grants are the calls: act: true holds them all', () => {
    expect(diff(expected(fn, 'kinesis', places, true), granted(on.t, fn, places.prefix))).toEqual({ missing: [], unused: [] });
  });

  test('act: true adds exactly the act entries, on the directory, every owner and spare, and their streams', () => {
    const added = granted(on.t, fn, places.prefix).filter((g) => !granted(off.t, fn, places.prefix).includes(g));
    const actEntries = manifest.calls[fn]
      .filter((g) => g.act)
      .flatMap((g) =>
        g.resource.startsWith('table/owner')
          ? ['a', 'b', 'c'].map((o) => `${g.action} ${g.resource.replace('table/owner', `table/${o}`)}`)
          : [`${g.action} ${g.resource.replace('table/directory', 'table/slots')}`],
      );
    expect(added.sort()).toEqual(actEntries.sort());
    // 2 on the directory, 6 on each of the 3 owners and 3 on each one's stream.
    expect(added.length).toBe(2 + 3 * (6 + 3));
    // Nothing is taken away either.
    for (const g of granted(off.t, fn, places.prefix)) expect(granted(on.t, fn, places.prefix)).toContain(g);
  });

  test('a dry run cannot write the directory\'s entries, an owner\'s items or read a stream', () => {
    const writes = ['PutItem', 'DeleteItem', 'BatchWriteItem', 'TransactWriteItems', 'UpdateTable', 'GetRecords'];
    for (const g of granted(off.t, fn, places.prefix)) {
      const [action] = g.split(' ');
      expect(writes.map((w) => `dynamodb:${w}`)).not.toContain(action);
    }
    expect(fnProps(off.t).Environment.Variables.HEATSINK_AUTOPILOT_ACT).toBe('false');
    expect(fnProps(on.t).Environment.Variables.HEATSINK_AUTOPILOT_ACT).toBe('true');
  });

  test('the example deploys the block only: one function, the team\'s four tables', () => {
    const functions = Object.values(off.t.findResources('AWS::Lambda::Function')).map((f) => f.Properties.FunctionName);
    expect(functions).toEqual(['places-directory-autopilot']);
    const tables = Object.values(off.t.findResources('AWS::DynamoDB::GlobalTable')).map((r) => r.Properties.TableName).sort();
    expect(tables).toEqual(['places-a', 'places-b', 'places-c', 'places-slots']);
    const table = (name: string) =>
      Object.values(off.t.findResources('AWS::DynamoDB::GlobalTable')).find((r) => r.Properties.TableName === name)!.Properties;
    for (const name of tables) {
      const p = table(name);
      expect(p.KeySchema).toEqual([
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ]);
      expect(p.BillingMode).toBe('PAY_PER_REQUEST');
      expect(p.Replicas[0].PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
      expect(p.Replicas[0].DeletionProtectionEnabled).toBe(true);
      expect(p.StreamSpecification?.StreamViewType ?? null).toBe(name === 'places-slots' ? null : 'NEW_AND_OLD_IMAGES');
    }
    off.t.resourceCountIs('AWS::ApiGatewayV2::Api', 0);
  });

  test('the function: its binary\'s settings and environment', () => {
    const p = fnProps(off.t);
    expect({ timeout: p.Timeout, memory: p.MemorySize, reserved: p.ReservedConcurrentExecutions }).toEqual({ timeout: 900, memory: 512, reserved: 1 });
    expect(p.Environment.Variables).toEqual({
      HEATSINK_PREFIX: 'places-',
      RUST_LOG: 'info',
      HEATSINK_DIRECTORY_TABLE: 'places-slots',
      HEATSINK_AUTOPILOT_SPARE: 'places-c',
      HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES: '5',
      HEATSINK_AUTOPILOT_ACT: 'false',
    });
  });

  test('every 5 minutes, no async retries, failures parked in its own queue', () => {
    const fnId = Object.entries(off.t.findResources('AWS::Lambda::Function')).find(
      ([, f]) => f.Properties.FunctionName === 'places-directory-autopilot',
    )![0];
    const queueId = Object.entries(off.t.findResources('AWS::SQS::Queue')).find(
      ([, q]) => q.Properties.QueueName === 'places-directory-autopilot-failures',
    )![0];
    const [rule] = Object.values(off.t.findResources('AWS::Events::Rule'));
    expect(rule.Properties).toMatchObject({ Name: 'places-directory-autopilot-schedule', ScheduleExpression: 'rate(5 minutes)', State: 'ENABLED' });
    expect(rule.Properties.Targets[0]).toMatchObject({
      Arn: { 'Fn::GetAtt': [fnId, 'Arn'] },
      RetryPolicy: { MaximumRetryAttempts: 2, MaximumEventAgeInSeconds: 600 },
      DeadLetterConfig: { Arn: { 'Fn::GetAtt': [queueId, 'Arn'] } },
    });
    const [invoke] = Object.values(off.t.findResources('AWS::Lambda::EventInvokeConfig'));
    expect(invoke.Properties).toMatchObject({
      FunctionName: { Ref: fnId },
      MaximumRetryAttempts: 0,
      MaximumEventAgeInSeconds: 300,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [queueId, 'Arn'] } } },
    });
  });

  test.each([
    ['places-directory-autopilot-failing', 'AutopilotPeriodCompleted', 'Sum', 'LessThanThreshold', 'breaching', 4],
    ['places-directory-autopilot-paused', 'AutopilotPaused', 'Maximum', 'GreaterThanOrEqualToThreshold', 'notBreaching', 3],
    ['places-directory-autopilot-out-of-budget', 'AutopilotOutOfBudget', 'Maximum', 'GreaterThanOrEqualToThreshold', 'notBreaching', 3],
    ['places-directory-autopilot-unproven', 'AutopilotUnproven', 'Maximum', 'GreaterThanOrEqualToThreshold', 'notBreaching', 3],
  ])('alarm %s', (name, metric, stat, comparison, missing, periods) => {
    const alarm = Object.values(off.t.findResources('AWS::CloudWatch::Alarm')).find((a) => a.Properties.AlarmName === name)!;
    expect(alarm.Properties).toMatchObject({
      Namespace: 'heatsink',
      MetricName: metric,
      Dimensions: [{ Name: 'Function', Value: 'directory-autopilot' }],
      Statistic: stat,
      Period: 300,
      ComparisonOperator: comparison,
      Threshold: 1,
      EvaluationPeriods: periods,
      DatapointsToAlarm: periods,
      TreatMissingData: missing,
    });
    expect(alarm.Properties.AlarmActions).toHaveLength(1);
    expect(alarm.Properties.OKActions).toHaveLength(1);
    expect(alarm.Properties.AlarmDescription).toMatch(/Runbook: README "Alarms"\.$/);
  });

  test('errors and throttles alarms too', () => {
    const names = Object.values(off.t.findResources('AWS::CloudWatch::Alarm')).map((a) => a.Properties.AlarmName).sort();
    expect(names).toEqual(
      ['errors', 'failing', 'out-of-budget', 'paused', 'throttles', 'unproven'].map((k) => `places-directory-autopilot-${k}`).sort(),
    );
  });
});

describe('DirectoryAutopilot props', () => {
  const stack = (extra: Partial<DirectoryAutopilotProps>) => {
    const a = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const s = new Stack(a, 'S');
    const table = (id: string, name: string, stream: boolean) =>
      new dynamodb.TableV2(s, id, {
        tableName: name,
        partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
        sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
        dynamoStream: stream ? dynamodb.StreamViewType.NEW_AND_OLD_IMAGES : undefined,
      });
    new DirectoryAutopilot(s, 'Autopilot', {
      prefix: 'geo-',
      code: () => placeholderCode(),
      directory: table('D', 'geo-directory', false),
      owners: [table('A', 'geo-a', true), table('B', 'geo-b', true)],
      ...extra,
    });
    return Template.fromStack(s);
  };
  const env = (tt: Template) => Object.values(tt.findResources('AWS::Lambda::Function'))[0].Properties.Environment.Variables;

  test('no spare: HEATSINK_AUTOPILOT_SPARE is not set; the governor\'s knobs only when given', () => {
    const plain = env(stack({}));
    expect(plain.HEATSINK_AUTOPILOT_SPARE).toBeUndefined();
    for (const k of ['SUSTAIN', 'COOLDOWN_MINUTES', 'PER_HOUR', 'PER_DAY', 'OWNERS_PER_OPERATION', 'BAND']) {
      expect(plain[`HEATSINK_AUTOPILOT_${k}`]).toBeUndefined();
    }
    const tuned = env(stack({ cloudwatchMinutes: 10, governor: { sustain: 3, cooldownMinutes: 30, perHour: 2, perDay: 12, ownersPerOperation: 2, band: 0.05 } }));
    expect(tuned).toMatchObject({
      HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES: '10',
      HEATSINK_AUTOPILOT_SUSTAIN: '3',
      HEATSINK_AUTOPILOT_COOLDOWN_MINUTES: '30',
      HEATSINK_AUTOPILOT_PER_HOUR: '2',
      HEATSINK_AUTOPILOT_PER_DAY: '12',
      HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION: '2',
      HEATSINK_AUTOPILOT_BAND: '0.05',
    });
  });

  test('a spare must be one of the owners', () => {
    expect(() => stack({ spare: ['geo-z'] })).toThrow(/not among owners/);
    expect(env(stack({ spare: ['geo-b'] })).HEATSINK_AUTOPILOT_SPARE).toBe('geo-b');
  });

  test('another schedule: the rule\'s rate, the events\' age and the heartbeat\'s window follow it', () => {
    const tt = stack({ schedule: Duration.minutes(10) });
    expect(Object.values(tt.findResources('AWS::Events::Rule'))[0].Properties.ScheduleExpression).toBe('rate(10 minutes)');
    expect(Object.values(tt.findResources('AWS::Lambda::EventInvokeConfig'))[0].Properties.MaximumEventAgeInSeconds).toBe(600);
    const failing = Object.values(tt.findResources('AWS::CloudWatch::Alarm')).find((a) => a.Properties.AlarmName === 'geo-directory-autopilot-failing')!;
    expect(failing.Properties.EvaluationPeriods).toBe(6);
  });
});

/**
 * The "protect your own table" example (examples/orders.ts): a user's `orders` table counted by
 * `customer`, the hot-key guard on it. It synthesizes with cdk-nag clean, its roles hold exactly
 * the functions' calls under its own names (infra/grants.json `examples.orders`), and the blocks
 * are configured from its table, not the photo app's.
 */
import { App, Validations } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import * as fs from 'fs';
import * as path from 'path';
import { OrdersStack } from '../examples/orders';
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
  const want = expected(fn, example.source, example);
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

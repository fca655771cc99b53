import { aws_lambda as lambda } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as fs from 'fs';
import * as path from 'path';
import { INSERT_ONLY_DENIED, LikeEventsSource } from '../lib/heatsink-stack';
import { EMF_METRICS, EMF_NAMESPACE, EMF_PROCESSES } from '../lib/observability';
import { FUNCTION_NAMES, TABLES } from '../lib/schema';
import { policyOwner, resources, synth, Synth } from './helpers';

let s: Synth;
beforeAll(() => {
  s = synth();
});

const fnLogicalId = (name: string, t: Template = s.template) =>
  Object.entries(resources(t, 'AWS::Lambda::Function')).find(
    ([, r]) => r.Properties.FunctionName === `heatsink-${name}`,
  )![0];

describe('tables', () => {
  test('six on-demand tables with point-in-time recovery', () => {
    s.template.resourceCountIs('AWS::DynamoDB::GlobalTable', 6);
    for (const r of Object.values(resources(s.template, 'AWS::DynamoDB::GlobalTable'))) {
      expect(r.Properties.BillingMode).toBe('PAY_PER_REQUEST');
      expect(r.Properties.Replicas[0].PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
    }
  });

  test('Contributor Insights on every table and every GSI: accessed keys where the controller acts, throttled keys elsewhere', () => {
    let gsis = 0;
    const modes: Record<string, string> = {};
    for (const r of Object.values(resources(s.template, 'AWS::DynamoDB::GlobalTable'))) {
      const replica = r.Properties.Replicas[0];
      expect(replica.ContributorInsightsSpecification.Enabled).toBe(true);
      modes[r.Properties.TableName] = replica.ContributorInsightsSpecification.Mode;
      for (const g of r.Properties.GlobalSecondaryIndexes ?? []) {
        const spec = replica.GlobalSecondaryIndexes.find((x: any) => x.IndexName === g.IndexName);
        expect(spec.ContributorInsightsSpecification.Enabled).toBe(true);
        modes[`${r.Properties.TableName}/${g.IndexName}`] = spec.ContributorInsightsSpecification.Mode;
        gsis++;
      }
    }
    expect(gsis).toBe(TABLES.reduce((n, t) => n + t.gsis.length, 0));
    // The controller reads the accessed-keys rules of counters (and its index) to name a hot
    // count before it throttles; elsewhere the accessed-keys rule would bill every request for nothing.
    expect(modes).toEqual({
      'heatsink-liked': 'THROTTLED_KEYS',
      'heatsink-liked/by-post': 'THROTTLED_KEYS',
      'heatsink-counters': 'ACCESSED_AND_THROTTLED_KEYS',
      'heatsink-counters/touched': 'ACCESSED_AND_THROTTLED_KEYS',
      'heatsink-hotkeys': 'THROTTLED_KEYS',
      'heatsink-leases': 'THROTTLED_KEYS',
      'heatsink-posts': 'THROTTLED_KEYS',
      'heatsink-posts/by-creator': 'THROTTLED_KEYS',
      'heatsink-autopilot': 'THROTTLED_KEYS',
    });
  });

  test('Contributor Insights mode is configurable', () => {
    const throttled = synth({ contributorInsightsMode: 'THROTTLED_KEYS' });
    const json = JSON.stringify(throttled.template.toJSON());
    expect(json).not.toContain('ACCESSED_AND_THROTTLED_KEYS');
    // Every table and every GSI has its own Contributor Insights specification.
    const specs = TABLES.length + TABLES.reduce((n, t) => n + t.gsis.length, 0);
    expect(json.match(/"Mode":"THROTTLED_KEYS"/g)).toHaveLength(specs);
  });

  test('liked streams NEW_AND_OLD_IMAGES and copies changes to like-events', () => {
    const streamId = Object.keys(resources(s.template, 'AWS::Kinesis::Stream'))[0];
    s.template.hasResourceProperties('AWS::DynamoDB::GlobalTable', {
      TableName: 'heatsink-liked',
      StreamSpecification: { StreamViewType: 'NEW_AND_OLD_IMAGES' },
      Replicas: [Match.objectLike({ KinesisStreamSpecification: { StreamArn: { 'Fn::GetAtt': [streamId, 'Arn'] } } })],
    });
  });

  test('hotkeys expire by TTL on expires_at', () => {
    s.template.hasResourceProperties('AWS::DynamoDB::GlobalTable', {
      TableName: 'heatsink-hotkeys',
      TimeToLiveSpecification: { AttributeName: 'expires_at', Enabled: true },
    });
  });
});

// likes-aggregator reads the liked table's changes from exactly one source: both carry the same
// changes, so two mappings would count every like twice.
describe.each<[LikeEventsSource, boolean]>([
  ['kinesis', true],
  ['dynamodb-streams', false],
])('likes-aggregator event source: %s', (mode, isDefault) => {
  let t: Template;
  beforeAll(() => {
    t = isDefault ? s.template : synth({ likeEventsSource: mode }).template;
  });
  const ids = () => ({
    table: Object.entries(resources(t, 'AWS::DynamoDB::GlobalTable')).find(
      ([, r]) => r.Properties.TableName === 'heatsink-liked',
    )![0],
    stream: Object.keys(resources(t, 'AWS::Kinesis::Stream'))[0],
  });
  const aggregatorStatements = () =>
    Object.entries(resources(t, 'AWS::IAM::Policy'))
      .filter(([, p]) => policyOwner(t, p) === 'likesaggregator')
      .flatMap(([, p]) => p.Properties.PolicyDocument.Statement);

  test('exactly one event source mapping for the aggregator, with partial batch failures', () => {
    const all = Object.values(resources(t, 'AWS::Lambda::EventSourceMapping'));
    const mappings = all.filter((m) => m.Properties.FunctionName?.Ref === fnLogicalId('likes-aggregator', t));
    expect(mappings).toHaveLength(1);
    expect(all).toHaveLength(1);
    const { table, stream } = ids();
    expect(mappings[0].Properties.EventSourceArn).toEqual(
      mode === 'kinesis' ? { 'Fn::GetAtt': [stream, 'Arn'] } : { 'Fn::GetAtt': [table, 'StreamArn'] },
    );
    expect(mappings[0].Properties).toMatchObject({
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      BisectBatchOnFunctionError: true,
      ParallelizationFactor: 1,
      StartingPosition: 'TRIM_HORIZON',
    });
    expect(mappings[0].Properties.DestinationConfig.OnFailure.Destination).toBeDefined();
    // Its own EventCount metrics, and alarms on the events it dropped or parked.
    expect(mappings[0].Properties.MetricsConfig).toEqual({ Metrics: ['EventCount'] });
    const [mappingId] = Object.entries(resources(t, 'AWS::Lambda::EventSourceMapping'))[0];
    for (const [name, metric] of [
      ['heatsink-likes-aggregator-dropped-events', 'DroppedEventCount'],
      ['heatsink-likes-aggregator-parked-events', 'OnFailureDestinationDeliveredEventCount'],
    ]) {
      const alarm = Object.values(resources(t, 'AWS::CloudWatch::Alarm')).find((a) => a.Properties.AlarmName === name)!.Properties;
      expect(alarm).toMatchObject({ Namespace: 'AWS/Lambda', MetricName: metric, Statistic: 'Sum', Threshold: 1 });
      expect(alarm.Dimensions).toEqual([{ Name: 'EventSourceMappingUUID', Value: { Ref: mappingId } }]);
    }
  });

  test('the table copies its changes to like-events only when Kinesis is the source; its own stream stays', () => {
    const liked = Object.values(resources(t, 'AWS::DynamoDB::GlobalTable')).find(
      (r) => r.Properties.TableName === 'heatsink-liked',
    );
    expect(liked.Properties.StreamSpecification).toEqual({ StreamViewType: 'NEW_AND_OLD_IMAGES' });
    const kinesisSpec = liked.Properties.Replicas[0].KinesisStreamSpecification;
    if (mode === 'kinesis') expect(kinesisSpec).toEqual({ StreamArn: { 'Fn::GetAtt': [ids().stream, 'Arn'] } });
    else expect(kinesisSpec).toBeUndefined();
    // The like-events stream itself is kept in both modes (schema agreement, likes-api's puts).
    t.resourceCountIs('AWS::Kinesis::Stream', 1);
  });

  test('the aggregator may read the chosen source only', () => {
    const statements = aggregatorStatements();
    expect(statements.length).toBeGreaterThan(0);
    const actions = statements.flatMap((st: any) => [st.Action].flat());
    const kinesisReads = actions.filter((a: string) => a.startsWith('kinesis:'));
    const streamReads = actions.filter((a: string) =>
      ['dynamodb:DescribeStream', 'dynamodb:GetRecords', 'dynamodb:GetShardIterator', 'dynamodb:ListStreams'].includes(a),
    );
    const { table, stream } = ids();
    const resourcesOf = (prefix: string) =>
      statements
        .filter((st: any) => [st.Action].flat().some((a: string) => a.startsWith(prefix)))
        .flatMap((st: any) => [st.Resource].flat());
    if (mode === 'kinesis') {
      expect(kinesisReads).toEqual(expect.arrayContaining(['kinesis:GetRecords', 'kinesis:GetShardIterator']));
      expect(streamReads).toEqual([]);
      expect(resourcesOf('kinesis:')).toEqual([{ 'Fn::GetAtt': [stream, 'Arn'] }]);
    } else {
      expect(streamReads).toEqual(expect.arrayContaining(['dynamodb:GetRecords', 'dynamodb:GetShardIterator']));
      expect(kinesisReads).toEqual([]);
      for (const r of statements.filter((st: any) => [st.Action].flat().some((a: string) => streamReads.includes(a)))) {
        expect(r.Resource).toEqual({ 'Fn::GetAtt': [table, 'StreamArn'] });
      }
    }
  });

  if (!isDefault) {
    test('AwsSolutions checks pass in this mode too', () => {
      const { app } = synth({ likeEventsSource: mode }, true);
      const assembly = app.synth();
      const report = JSON.parse(fs.readFileSync(path.join(assembly.directory, 'validation-report.json'), 'utf8'));
      const pack = report.pluginReports.find((r: any) => r.pluginName === 'AwsSolutions');
      expect(pack.conclusion).toBe('success');
      expect(pack.violations).toEqual([]);
    });
  }
});

test('an unknown event source is refused', () => {
  expect(() => synth({ likeEventsSource: 'both' as LikeEventsSource })).toThrow(/likeEventsSource/);
});

// infra/esm.json, read here on its own (not through lib/esm.ts) so a stack that stops reading it fails.
const sharedEsm = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'esm.json'), 'utf8'));

test('like-events: the shared definition\'s 13 provisioned, encrypted shards (10,000 likes/s at 77 % of 1,000 records/s per shard)', () => {
  expect(sharedEsm.shards).toBe(13);
  s.template.hasResourceProperties('AWS::Kinesis::Stream', {
    Name: 'heatsink-like-events',
    ShardCount: sharedEsm.shards,
    StreamModeDetails: { StreamMode: sharedEsm.stream_mode },
    StreamEncryption: { EncryptionType: 'KMS', KeyId: 'alias/aws/kinesis' },
  });
});

test('the aggregator\'s mapping takes batch size and window from infra/esm.json, in both source modes', () => {
  for (const source of ['kinesis', 'dynamodb-streams'] as LikeEventsSource[]) {
    const t = source === sharedEsm.source ? s.template : synth({ likeEventsSource: source }).template;
    const mappings = Object.values(resources(t, 'AWS::Lambda::EventSourceMapping'));
    expect(mappings).toHaveLength(1);
    expect(mappings[0].Properties).toMatchObject({
      BatchSize: sharedEsm.batch_size,
      MaximumBatchingWindowInSeconds: sharedEsm.window_seconds,
    });
  }
});

describe('functions', () => {
  test('five arm64 custom-runtime functions named after functions/<name>', () => {
    s.template.resourceCountIs('AWS::Lambda::Function', 5);
    for (const name of FUNCTION_NAMES) {
      s.template.hasResourceProperties('AWS::Lambda::Function', {
        FunctionName: `heatsink-${name}`,
        Runtime: 'provided.al2023',
        Handler: 'bootstrap',
        Architectures: ['arm64'],
        Environment: { Variables: Match.objectLike({ HEATSINK_PREFIX: 'heatsink-' }) },
      });
    }
  });

  test('count-rebuilder compacts closed shards with the like-events retention as the grace', () => {
    s.template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'heatsink-count-rebuilder',
      Environment: { Variables: Match.objectLike({ HEATSINK_COMPACT_GRACE_SECONDS: String(24 * 3600) }) },
    });
    s.template.hasResourceProperties('AWS::Kinesis::Stream', { Name: 'heatsink-like-events', RetentionPeriodHours: 24 });
  });

  test('x86_64 is one prop away', () => {
    const x86 = synth({ architecture: lambda.Architecture.X86_64 });
    for (const r of Object.values(resources(x86.template, 'AWS::Lambda::Function'))) {
      expect(r.Properties.Architectures).toEqual(['x86_64']);
    }
  });

  test('count-rebuilder every 5 minutes; hotkey-controller on heatsink alarm state changes and a schedule', () => {
    const rules = Object.values(resources(s.template, 'AWS::Events::Rule'));
    const targetOf = (r: any) => r.Properties.Targets[0].Arn['Fn::GetAtt'][0];
    const rebuild = rules.find((r) => targetOf(r) === fnLogicalId('count-rebuilder'));
    expect(rebuild.Properties.ScheduleExpression).toBe('rate(5 minutes)');
    const controller = rules.filter((r) => targetOf(r) === fnLogicalId('hotkey-controller'));
    expect(controller).toHaveLength(3);
    const pattern = controller.find((r) => r.Properties.Name === 'heatsink-hotkey-controller-alarms')!.Properties
      .EventPattern;
    // Exact names of the hot-key alarms (a prefix would also match `heatsink-staging-`).
    const names: string[] = pattern.detail.alarmName;
    expect(pattern.source).toEqual(['aws.cloudwatch']);
    expect(pattern['detail-type']).toEqual(['CloudWatch Alarm State Change']);
    expect(names.every((n) => typeof n === 'string')).toBe(true);
    const alarmNames = Object.values(resources(s.template, 'AWS::CloudWatch::Alarm')).map((a) => a.Properties.AlarmName);
    expect(names.sort()).toEqual(alarmNames.filter((n) => /-hot$|-throttled-key-range$/.test(n)).sort());
    expect(JSON.stringify(pattern).length).toBeLessThan(2048);
    expect(controller.some((r) => r.Properties.ScheduleExpression)).toBe(true);
  });

  test('hotkey-controller on sampler reports from the control bus, allowed to be invoked by that rule', () => {
    const rules = resources(s.template, 'AWS::Events::Rule');
    const [ruleId, rule] = Object.entries(rules).find(
      ([, r]) => r.Properties.Name === 'heatsink-hotkey-controller-sampler-reports',
    )!;
    expect(rule.Properties.Name).toBe('heatsink-hotkey-controller-sampler-reports');
    const [busId, bus] = Object.entries(resources(s.template, 'AWS::Events::EventBus'))[0];
    expect(bus.Properties.Name).toBe('heatsink-control');
    expect(rule.Properties.EventBusName).toEqual({ Ref: busId }); // never the default bus
    expect(rule.Properties.State).toBe('ENABLED');
    expect(rule.Properties.EventPattern).toEqual({
      source: ['heatsink.sampler'],
      'detail-type': ['heatsink hot-key report'],
    });
    expect(rule.Properties.Targets).toHaveLength(1);
    expect(rule.Properties.Targets[0]).toMatchObject({
      Arn: { 'Fn::GetAtt': [fnLogicalId('hotkey-controller'), 'Arn'] },
      RetryPolicy: { MaximumRetryAttempts: 2, MaximumEventAgeInSeconds: 600 },
      DeadLetterConfig: { Arn: expect.anything() },
    });
    s.template.hasResourceProperties('AWS::Lambda::Permission', {
      Action: 'lambda:InvokeFunction',
      FunctionName: { 'Fn::GetAtt': [fnLogicalId('hotkey-controller'), 'Arn'] },
      Principal: 'events.amazonaws.com',
      SourceArn: { 'Fn::GetAtt': [ruleId, 'Arn'] },
    });
  });

  test('likes-api behind an HTTP API with the two routes, throttled and access-logged', () => {
    const routes = Object.values(resources(s.template, 'AWS::ApiGatewayV2::Route')).map((r) => r.Properties.RouteKey);
    expect(routes.sort()).toEqual(['GET /posts/{post}', 'POST /posts/{post}/likes']);
    s.template.hasResourceProperties('AWS::ApiGatewayV2::Stage', {
      DefaultRouteSettings: Match.objectLike({ ThrottlingRateLimit: Match.anyValue() }),
      AccessLogSettings: Match.objectLike({ DestinationArn: Match.anyValue() }),
    });
  });
});

describe('least privilege', () => {
  const statements = () =>
    Object.values(resources(s.template, 'AWS::IAM::Policy')).flatMap((p) =>
      p.Properties.PolicyDocument.Statement.map((st: any) => ({ id: policyOwner(s.template, p), ...st })),
    );
  const managedStatements = () =>
    Object.values(resources(s.template, 'AWS::IAM::ManagedPolicy')).flatMap(
      (p) => p.Properties.PolicyDocument.Statement,
    );

  test('one role per function plus the sampler publisher, no managed policies', () => {
    const roles = Object.values(resources(s.template, 'AWS::IAM::Role'));
    expect(roles).toHaveLength(FUNCTION_NAMES.length + 1);
    for (const r of roles) expect(r.Properties.ManagedPolicyArns).toBeUndefined();
  });

  test('no wildcard actions anywhere', () => {
    for (const st of [...statements(), ...managedStatements()]) {
      for (const a of [st.Action].flat()) expect(a).not.toMatch(/\*/);
    }
  });

  test('no Resource "*" in any role policy but X-Ray\'s, whose two actions take no resource', () => {
    for (const st of [...statements(), ...managedStatements()]) {
      if ([st.Resource].flat().includes('*')) expect([st.Action].flat().sort()).toEqual(['xray:PutTelemetryRecords', 'xray:PutTraceSegments']);
    }
  });

  test('sampler publisher: a role that may PutEvents on the control bus for the sampler source only', () => {
    expect(Object.keys(resources(s.template, 'AWS::IAM::ManagedPolicy'))).toHaveLength(0);
    const [roleId, role] = Object.entries(resources(s.template, 'AWS::IAM::Role')).find(
      ([, r]) => r.Properties.RoleName === 'heatsink-sampler-publisher',
    )!;
    expect(role.Properties.ManagedPolicyArns).toBeUndefined();
    const busId = Object.keys(resources(s.template, 'AWS::Events::EventBus'))[0];
    const policy = Object.values(resources(s.template, 'AWS::IAM::Policy')).find((p) =>
      p.Properties.Roles.some((r: any) => r.Ref === roleId),
    );
    expect(policy.Properties.PolicyDocument.Statement).toEqual([
      {
        Effect: 'Allow',
        Action: 'events:PutEvents',
        Resource: { 'Fn::GetAtt': [busId, 'Arn'] },
        Condition: { StringEquals: { 'events:source': 'heatsink.sampler' } },
      },
    ]);
    s.template.hasOutput('SamplerPublisherRoleArn', { Value: { 'Fn::GetAtt': [roleId, 'Arn'] } });
  });

  test('the control bus denies PutEvents to every principal but the sampler publisher role', () => {
    const busId = Object.keys(resources(s.template, 'AWS::Events::EventBus'))[0];
    const roleId = Object.entries(resources(s.template, 'AWS::IAM::Role')).find(
      ([, r]) => r.Properties.RoleName === 'heatsink-sampler-publisher',
    )![0];
    const policies = Object.values(resources(s.template, 'AWS::Events::EventBusPolicy'));
    expect(policies).toHaveLength(1);
    expect(policies[0].Properties.EventBusName).toEqual({ Ref: busId });
    expect(policies[0].Properties.Statement).toEqual({
      Sid: 'cdk-OnlyTheSamplerPublisher',
      Effect: 'Deny',
      Principal: { AWS: '*' },
      Action: 'events:PutEvents',
      Resource: { 'Fn::GetAtt': [busId, 'Arn'] },
      Condition: { ArnNotEquals: { 'aws:PrincipalArn': { 'Fn::GetAtt': [roleId, 'Arn'] } } },
    });
  });

  test('data-plane writes only where each function needs them', () => {
    const writes = ['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem'];
    const tableIds = Object.fromEntries(
      Object.entries(resources(s.template, 'AWS::DynamoDB::GlobalTable')).map(([id, r]) => [id, r.Properties.TableName]),
    );
    const writable: Record<string, Set<string>> = {};
    for (const st of statements()) {
      if (![st.Action].flat().some((a: string) => writes.includes(a))) continue;
      for (const res of [st.Resource].flat()) {
        const table = tableIds[res?.['Fn::GetAtt']?.[0]];
        if (table) (writable[st.id] ??= new Set()).add(table);
      }
    }
    const sorted = Object.fromEntries(Object.entries(writable).map(([k, v]) => [k, [...v].sort()]));
    expect(sorted).toEqual({
      likesapi: ['heatsink-liked'],
      likesaggregator: ['heatsink-counters'],
      countrebuilder: ['heatsink-counters'],
      hotkeycontroller: ['heatsink-hotkeys'],
      autopilot: ['heatsink-autopilot'],
    });
  });

  test('count-rebuilder may call exactly what heatsink::counter::rebuild::Repair calls, per table', () => {
    const tableIds = Object.fromEntries(
      Object.entries(resources(s.template, 'AWS::DynamoDB::GlobalTable')).map(([id, r]) => [id, r.Properties.TableName]),
    );
    const granted: Record<string, string[]> = {};
    for (const st of statements().filter((st) => st.id === 'countrebuilder')) {
      for (const res of [st.Resource].flat()) {
        const table = tableIds[res?.['Fn::GetAtt']?.[0]];
        if (table) granted[table] = [...(granted[table] ?? []), ...[st.Action].flat()].sort();
      }
    }
    // Table-level grants only; its index Queries (liked/by-post, counters/touched) are checked
    // against infra/grants.json in grants.test.ts. The events table is never scanned (its
    // index is Queried per post); the counters table is, a page at a time, by the sweep.
    expect(granted).toEqual({
      'heatsink-counters': ['dynamodb:DeleteItem', 'dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:Query', 'dynamodb:Scan', 'dynamodb:UpdateItem'],
    });
  });

  test('liked is insert-only for every principal (the counter repair rests on it); no other table has a resource policy', () => {
    const policies = Object.values(resources(s.template, 'AWS::DynamoDB::GlobalTable'))
      .map((t) => [t.Properties.TableName, t.Properties.Replicas?.[0]?.ResourcePolicy?.PolicyDocument])
      .filter(([, p]) => p !== undefined);
    expect(policies.map(([name]) => name)).toEqual(['heatsink-liked']);
    const [[, doc]] = policies;
    expect(doc.Statement).toHaveLength(1);
    const [st] = doc.Statement;
    expect(st).toMatchObject({ Sid: 'InsertOnly', Effect: 'Deny', Principal: { AWS: '*' } });
    expect([st.Action].flat().sort()).toEqual([...INSERT_ONLY_DENIED].sort());
    expect(JSON.stringify(st.Resource)).toContain('table/heatsink-liked');
    // The one writer of liked writes what the policy leaves: conditional inserts.
    const writes = statements().filter(
      (st) => JSON.stringify(st.Resource).includes('Tableliked') && [st.Action].flat().some((a: string) => a !== 'dynamodb:PutItem' && !a.startsWith('dynamodb:Query') && !a.startsWith('dynamodb:Describe') && !a.startsWith('dynamodb:GetRecords') && !a.startsWith('dynamodb:GetShardIterator') && !a.startsWith('dynamodb:ListStreams')),
    );
    expect(writes.flatMap((st) => [st.Action].flat()).filter((a: string) => INSERT_ONLY_DENIED.includes(a))).toEqual([]);
  });

  test('no function reads or writes the leases table: stream consumers run outside the stack', () => {
    const leasesId = Object.entries(resources(s.template, 'AWS::DynamoDB::GlobalTable')).find(
      ([, r]) => r.Properties.TableName === 'heatsink-leases',
    )![0];
    // Describe* (the controller's Contributor Insights status of every table) is not data access.
    const dataPlane = statements().filter(
      (st) =>
        JSON.stringify(st.Resource).includes(`"${leasesId}"`) &&
        [st.Action].flat().some((a: string) => !a.startsWith('dynamodb:Describe')),
    );
    expect(dataPlane).toEqual([]);
  });
});

describe('alarms and dashboard', () => {
  const alarms = () => Object.values(resources(s.template, 'AWS::CloudWatch::Alarm')).map((a) => a.Properties);

  test('a hot-partition alarm on INSIGHT_RULE_METRIC MaxContributorValue per table and GSI', () => {
    const rules = Object.values(resources(s.template, 'AWS::CloudWatch::InsightRule')).map((r) => r.Properties.RuleName);
    // wcu + rcu per table and per GSI; no rule on a log field nothing emits (no function puts to Kinesis)
    const targets = TABLES.reduce((n, t) => n + 1 + t.gsis.length, 0);
    expect(rules).toHaveLength(2 * targets);
    expect(JSON.stringify(resources(s.template, 'AWS::CloudWatch::InsightRule'))).not.toContain('fields.stream');
    for (const rule of rules) {
      const alarm = alarms().find((a) =>
        (a.Metrics ?? []).some((m: any) => m.Expression?.includes(`INSIGHT_RULE_METRIC('${rule}', 'MaxContributorValue')`)),
      );
      expect(alarm).toBeDefined();
      const ceiling = rule.endsWith('-rcu') ? 3000 : 1000;
      expect(alarm.Threshold).toBeCloseTo(0.8 * ceiling);
    }
  });

  test('insight rules read the functions\' JSON logs by partition key', () => {
    const body = JSON.parse(
      Object.values(resources(s.template, 'AWS::CloudWatch::InsightRule')).find(
        (r) => r.Properties.RuleName === 'heatsink-counters-partition-wcu',
      ).Properties.RuleBody,
    );
    expect(body.LogGroupNames.sort()).toEqual(FUNCTION_NAMES.map((n) => `/aws/lambda/heatsink-${n}`).sort());
    expect(body.Contribution.Keys).toEqual(['$.fields.partition_key']);
    expect(body.Contribution.ValueOf).toBe('$.fields.consumed_wcu');
    expect(body.AggregateOn).toBe('Sum');
  });

  test('the alarm fraction is configurable', () => {
    const t = synth({ hotPartitionFraction: 0.5 }).template;
    const hot = Object.values(t.findResources('AWS::CloudWatch::Alarm')).filter((a) =>
      a.Properties.AlarmName.endsWith('-partition-wcu-hot'),
    );
    expect(hot.length).toBeGreaterThan(0);
    for (const a of hot) expect(a.Properties.Threshold).toBe(500);
  });

  test('throttling alarms by reason on every table and GSI', () => {
    const names = alarms().map((a) => a.AlarmName);
    for (const t of TABLES) {
      for (const target of [`heatsink-${t.logical}`, ...t.gsis.map((g) => `heatsink-${t.logical}-${g.name}`)]) {
        expect(names).toContain(`${target}-throttled-key-range`);
        expect(names).toContain(`${target}-throttled-capacity`);
      }
    }
    const keyRange = alarms().find((a) => a.AlarmName === 'heatsink-posts-by-creator-throttled-key-range');
    const metricNames = keyRange.Metrics.filter((m: any) => m.MetricStat).map((m: any) => m.MetricStat.Metric.MetricName);
    expect(metricNames.sort()).toEqual(['ReadKeyRangeThroughputThrottleEvents', 'WriteKeyRangeThroughputThrottleEvents']);
    const capacity = alarms().find((a) => a.AlarmName === 'heatsink-posts-by-creator-throttled-capacity');
    expect(capacity.Metrics.filter((m: any) => m.MetricStat).map((m: any) => m.MetricStat.Metric.MetricName).sort()).toEqual(
      [
        'ReadAccountLimitThrottleEvents',
        'ReadMaxOnDemandThroughputThrottleEvents',
        'ReadProvisionedThroughputThrottleEvents',
        'WriteAccountLimitThrottleEvents',
        'WriteMaxOnDemandThroughputThrottleEvents',
        'WriteProvisionedThroughputThrottleEvents',
      ],
    );
    expect(keyRange.Metrics[1].MetricStat.Metric.Dimensions).toContainEqual({
      Name: 'GlobalSecondaryIndexName',
      Value: 'by-creator',
    });
  });

  test('every alarm notifies the alarm topic and is named with the prefix the controller listens for', () => {
    for (const a of alarms()) {
      expect(a.AlarmName).toMatch(/^heatsink-/);
      expect(a.AlarmActions).toHaveLength(1);
    }
    expect(alarms().map((a) => a.AlarmName)).toEqual(
      expect.arrayContaining([
        'heatsink-likes-aggregator-iterator-age',
        'heatsink-like-events-write-throttled',
        'heatsink-counter-corrections',
        'heatsink-count-rebuilder-blocked',
        'heatsink-count-rebuilder-repair-lag',
        'heatsink-likes-aggregator-dedupe-shed',
        'heatsink-likes-aggregator-late-changes',
      ]),
    );
  });

  test('counter-corrections: any like the rebuilder corrected in a 5-minute run, to the alarm topic', () => {
    const found = Object.entries(resources(s.template, 'AWS::CloudWatch::Alarm')).filter(
      ([, a]) => a.Properties.AlarmName === 'heatsink-counter-corrections',
    );
    expect(found).toHaveLength(1);
    const alarm = found[0][1].Properties;
    expect(alarm).toMatchObject({
      Namespace: EMF_NAMESPACE,
      MetricName: EMF_METRICS.counterCorrection,
      Dimensions: [{ Name: 'Function', Value: 'count-rebuilder' }],
      Statistic: 'Sum',
      Period: 300,
      ComparisonOperator: 'GreaterThanThreshold',
      Threshold: 0,
      EvaluationPeriods: 1,
      TreatMissingData: 'notBreaching',
    });
    expect(alarm.DatapointsToAlarm).toBeUndefined();
    const topic = Object.keys(resources(s.template, 'AWS::SNS::Topic'));
    expect(topic).toHaveLength(1);
    expect(alarm.AlarmActions).toEqual([{ Ref: topic[0] }]);
    expect(alarm.OKActions).toEqual([{ Ref: topic[0] }]);
    expect(alarm.AlarmDescription).toContain('Runbook: README "Alarms"');
  });

  // The silent paths of the counter that page: a blocked or lagging repair (a blocked run still
  // feeds the heartbeat), shed dedupe identities and changes counted past the dedupe window.
  // Every one is an EMF metric of its one emitter, per 5 minutes, missing data not breaching
  // (the heartbeat covers missing runs; the shed metric is emitted only when above 0).
  test.each([
    ['heatsink-count-rebuilder-blocked', EMF_METRICS.repairBlocked, 'count-rebuilder', 'Maximum', 'GreaterThanOrEqualToThreshold', 1, 3],
    ['heatsink-count-rebuilder-repair-lag', EMF_METRICS.repairLag, 'count-rebuilder', 'Maximum', 'GreaterThanThreshold', 900, 3],
    ['heatsink-likes-aggregator-dedupe-shed', EMF_METRICS.dedupeShed, 'likes-aggregator', 'Sum', 'GreaterThanThreshold', 0, 1],
    ['heatsink-likes-aggregator-late-changes', EMF_METRICS.lateChanges, 'likes-aggregator', 'Sum', 'GreaterThanThreshold', 0, 1],
  ] as const)('%s: %s (%s) %s, %s %d in %d of the 5-minute periods, to the alarm topic', (name, metric, emitter, stat, op, threshold, periods) => {
    for (const t of [s.template, synth({ likeEventsSource: 'dynamodb-streams' }).template]) {
      const found = Object.values(resources(t, 'AWS::CloudWatch::Alarm')).filter((a) => a.Properties.AlarmName === name);
      expect(found).toHaveLength(1);
      const alarm = found[0].Properties;
      expect(alarm).toMatchObject({
        Namespace: EMF_NAMESPACE,
        MetricName: metric,
        Dimensions: [{ Name: 'Function', Value: emitter }],
        Statistic: stat,
        Period: 300,
        ComparisonOperator: op,
        Threshold: threshold,
        EvaluationPeriods: periods,
        TreatMissingData: 'notBreaching',
      });
      // M of N: every period of the N (three blocked or lagging runs in a row).
      if (periods > 1) expect(alarm.DatapointsToAlarm).toBe(periods);
      else expect(alarm.DatapointsToAlarm).toBeUndefined();
      const topic = Object.keys(resources(t, 'AWS::SNS::Topic'));
      expect(alarm.AlarmActions).toEqual([{ Ref: topic[0] }]);
      expect(alarm.OKActions).toEqual([{ Ref: topic[0] }]);
      expect(alarm.AlarmDescription).toContain('Runbook: README "Alarms"');
    }
  });

  /** The dashboard body with its tokens resolved to the default prefix (`heatsink-`). */
  const dashboardWidgets = (): any[] => {
    const dashboards = Object.values(resources(s.template, 'AWS::CloudWatch::Dashboard'));
    expect(dashboards).toHaveLength(1);
    const join = dashboards[0].Properties.DashboardBody['Fn::Join'];
    const text = join[1].map((part: any) => (typeof part === 'string' ? part : 'TOKEN')).join(join[0]);
    return JSON.parse(text).widgets;
  };
  const series = (title: RegExp) => {
    const widget = dashboardWidgets().find((w) => title.test(w.properties.title ?? ''));
    expect(widget).toBeDefined();
    return widget.properties.metrics as any[][];
  };

  test('dashboard: leases come from stream consumers, never from a function', () => {
    expect(series(/^Stream consumer leases \(heatsink tail --emf or an embedding service\)$/)).toEqual([
      ['heatsink', 'LeasesHeld', 'Function', 'stream-consumer', { stat: 'Maximum', label: 'held (max per worker)', period: 60 }],
      ['heatsink', 'LeasesExpired', 'Function', 'stream-consumer', { stat: 'Sum', label: 'expired, taken over', period: 60 }],
    ]);
  });

  test('dashboard: hot keys in the directory vs sampler reports the EventBridge rule matched', () => {
    expect(series(/^Hot keys: directory vs sampler reports delivered$/)).toEqual([
      ['heatsink', 'HotKeys', 'Function', 'hotkey-controller', { stat: 'Maximum', label: 'keys in the directory', period: 60 }],
      [
        'AWS/Events',
        'MatchedEvents',
        'RuleName',
        'heatsink-hotkey-controller-sampler-reports',
        { stat: 'Sum', label: 'sampler reports delivered', period: 60, yAxis: 'right' },
      ],
    ]);
  });

  test('dashboard: counter corrections per count-rebuilder run', () => {
    const widget = dashboardWidgets().find((w) => w.properties.title === 'Counter corrections (count-rebuilder)');
    expect(widget).toBeDefined();
    // One datapoint per 5-minute run; 300 s is CloudWatch's default, so the series omit it.
    expect(widget.properties.period).toBe(300);
    expect(widget.properties.metrics).toEqual([
      ['heatsink', 'CounterCorrectionLikes', 'Function', 'count-rebuilder', { stat: 'Sum', label: 'likes corrected' }],
      ['heatsink', 'CountersCorrected', 'Function', 'count-rebuilder', { stat: 'Sum', label: 'counters corrected' }],
      [
        'heatsink',
        'CountersUnsettled',
        'Function',
        'count-rebuilder',
        { stat: 'Maximum', label: 'counters unsettled', yAxis: 'right' },
      ],
      ['heatsink', 'CounterRebuildCompleted', 'Function', 'count-rebuilder', { stat: 'Sum', label: 'runs completed', yAxis: 'right' }],
    ]);
  });

  test('dashboard: the repair\'s progress per count-rebuilder run, with the repair-lag alarm\'s line', () => {
    const widget = dashboardWidgets().find((w) => w.properties.title === 'Counter repair progress (count-rebuilder)');
    expect(widget).toBeDefined();
    expect(widget.properties.period).toBe(300);
    expect(widget.properties.annotations).toEqual({ horizontal: [{ value: 900, label: 'alarm', yAxis: 'left' }] });
    expect(widget.properties.metrics).toEqual([
      ['heatsink', 'CounterRepairLag', 'Function', 'count-rebuilder', { stat: 'Maximum', label: 'proven progress behind (s)' }],
      ['heatsink', 'CounterRepairBlocked', 'Function', 'count-rebuilder', { stat: 'Maximum', label: 'run blocked', yAxis: 'right' }],
      ['heatsink', 'CounterRebuildLagging', 'Function', 'count-rebuilder', { stat: 'Maximum', label: 'checks lagging', yAxis: 'right' }],
    ]);
  });

  test('dashboard: the aggregator\'s late, shed, duplicate and foreign counts', () => {
    expect(series(/^Counter dedupe \(likes-aggregator\): late, shed, duplicates, foreign$/)).toEqual([
      ['heatsink', 'CounterLateChanges', 'Function', 'likes-aggregator', { stat: 'Sum', label: 'late, counted unchecked', period: 60 }],
      ['heatsink', 'CounterDedupeShed', 'Function', 'likes-aggregator', { stat: 'Sum', label: 'identities shed', period: 60 }],
      ['heatsink', 'CounterDuplicatesDropped', 'Function', 'likes-aggregator', { stat: 'Sum', label: 'duplicates dropped', period: 60, yAxis: 'right' }],
      ['heatsink', 'CounterForeignRecords', 'Function', 'likes-aggregator', { stat: 'Sum', label: 'foreign records skipped', period: 60, yAxis: 'right' }],
    ]);
  });

  test('dashboard: the autopilot\'s heartbeat, proposals and operations against its holds', () => {
    expect(series(/^Autopilot \(like-events\): periods, proposals, operations, holds$/)).toEqual([
      ['heatsink', 'AutopilotPeriodCompleted', 'Function', 'autopilot', { stat: 'Sum', label: 'periods completed', period: 60 }],
      ['heatsink', 'AutopilotProposals', 'Function', 'autopilot', { stat: 'Maximum', label: 'proposals', period: 60 }],
      ['heatsink', 'AutopilotOperationsStarted', 'Function', 'autopilot', { stat: 'Sum', label: 'splits and merges started', period: 60 }],
      ['heatsink', 'AutopilotPaused', 'Function', 'autopilot', { stat: 'Maximum', label: 'paused', period: 60, yAxis: 'right' }],
      ['heatsink', 'AutopilotOutOfBudget', 'Function', 'autopilot', { stat: 'Maximum', label: 'waiting on budget', period: 60, yAxis: 'right' }],
      ['heatsink', 'AutopilotUnproven', 'Function', 'autopilot', { stat: 'Maximum', label: 'unproven in flight', period: 60, yAxis: 'right' }],
    ]);
  });

  test('dashboard: every EMF series is a metric we emit, graphed with its one emitter', () => {
    const emitter: Record<string, string> = {
      [EMF_METRICS.counterLag]: 'likes-aggregator',
      [EMF_METRICS.counterFlushDelay]: 'likes-aggregator',
      [EMF_METRICS.leasesHeld]: EMF_PROCESSES.streamConsumer,
      [EMF_METRICS.leasesExpired]: EMF_PROCESSES.streamConsumer,
      [EMF_METRICS.hotKeys]: 'hotkey-controller',
      [EMF_METRICS.admissionRejected]: 'likes-api',
      [EMF_METRICS.counterCorrection]: 'count-rebuilder',
      [EMF_METRICS.countersCorrected]: 'count-rebuilder',
      [EMF_METRICS.countersUnsettled]: 'count-rebuilder',
      [EMF_METRICS.rebuildCompleted]: 'count-rebuilder',
      [EMF_METRICS.rebuildLagging]: 'count-rebuilder',
      [EMF_METRICS.repairBlocked]: 'count-rebuilder',
      [EMF_METRICS.repairLag]: 'count-rebuilder',
      [EMF_METRICS.dedupeShed]: 'likes-aggregator',
      [EMF_METRICS.lateChanges]: 'likes-aggregator',
      [EMF_METRICS.duplicatesDropped]: 'likes-aggregator',
      [EMF_METRICS.foreignRecords]: 'likes-aggregator',
      [EMF_METRICS.autopilotPeriodCompleted]: 'autopilot',
      [EMF_METRICS.autopilotOperationsStarted]: 'autopilot',
      [EMF_METRICS.autopilotPaused]: 'autopilot',
      [EMF_METRICS.autopilotUnproven]: 'autopilot',
      [EMF_METRICS.autopilotOutOfBudget]: 'autopilot',
      [EMF_METRICS.autopilotProposals]: 'autopilot',
    };
    expect(Object.keys(emitter).sort()).toEqual(Object.values(EMF_METRICS).sort());
    const emf = dashboardWidgets()
      .flatMap((w) => w.properties.metrics ?? [])
      .filter((m: any[]) => m[0] === EMF_NAMESPACE);
    expect(emf.map((m) => m[1]).sort()).toEqual(Object.values(EMF_METRICS).sort());
    for (const m of emf) expect([m[1], m[2], m[3]]).toEqual([m[1], 'Function', emitter[m[1]]]);
  });

  test('dashboard: capacity vs ceilings, top contributors, throttles, counter lag, iterator age, leases', () => {
    const dashboards = Object.values(resources(s.template, 'AWS::CloudWatch::Dashboard'));
    expect(dashboards).toHaveLength(1);
    const body = JSON.stringify(dashboards[0].Properties.DashboardBody);
    for (const needle of [
      'MaxContributorValue',
      'per-partition ceiling',
      'insightRule',
      'WriteKeyRangeThroughputThrottleEvents',
      'CounterLagEvents',
      'IteratorAge',
      'GetRecords.IteratorAgeMilliseconds',
      'LeasesHeld',
      'CounterCorrectionLikes',
    ]) {
      expect(body).toContain(needle);
    }
  });
});

describe('cdk-nag', () => {
  test('AwsSolutions checks pass; every acknowledgement says why', () => {
    const { app } = synth({}, true);
    const assembly = app.synth(); // throws when a rule is violated and not acknowledged
    const report = JSON.parse(fs.readFileSync(path.join(assembly.directory, 'validation-report.json'), 'utf8'));
    const pack = report.pluginReports.find((r: any) => r.pluginName === 'AwsSolutions');
    expect(pack.conclusion).toBe('success');
    expect(pack.violations).toEqual([]);
    const acknowledged = pack.suppressedViolations ?? [];
    for (const v of acknowledged) expect(v.reason.length).toBeGreaterThan(40);
    // Listed, each with its reason, in infra/README.md ("cdk-nag acknowledgements").
    expect([...new Set(acknowledged.map((v: any) => v.ruleName))].sort()).toEqual([
      'AwsSolutions-COG8',
      'AwsSolutions-IAM5[Resource::*]',
      ...['PKC', 'PKT'].map(
        (k) =>
          `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:insight-rule/DynamoDBContributorInsights-${k}-heatsink-counters-*]`,
      ),
      'AwsSolutions-SQS3',
    ]);
    expect(acknowledged.map((v: any) => v.ruleName)).not.toContain('AwsSolutions-APIG4');
    const readme = fs.readFileSync(path.join(__dirname, '..', '..', 'README.md'), 'utf8');
    for (const rule of ['AwsSolutions-COG8', 'AwsSolutions-IAM5', 'AwsSolutions-SQS3']) expect(readme).toContain(rule);
  });
});

// The autopilot: like-events' control loop, every minute, a dry run unless autopilotAct. The
// like-events stream exists in both source modes, so the autopilot does too.
describe.each<LikeEventsSource>(['kinesis', 'dynamodb-streams'])('autopilot (%s source)', (mode) => {
  let t: Template;
  beforeAll(() => {
    t = mode === 'kinesis' ? s.template : synth({ likeEventsSource: mode }).template;
  });
  const fn = () => resources(t, 'AWS::Lambda::Function')[fnLogicalId('autopilot', t)].Properties;

  test('every minute from EventBridge, no async retries, failures and undeliverable events parked in async-failures', () => {
    const [ruleId, rule] = Object.entries(resources(t, 'AWS::Events::Rule')).find(
      ([, r]) => r.Properties.Targets[0].Arn['Fn::GetAtt']?.[0] === fnLogicalId('autopilot', t),
    )!;
    expect(rule.Properties).toMatchObject({ Name: 'heatsink-autopilot-schedule', ScheduleExpression: 'rate(1 minute)', State: 'ENABLED' });
    expect(rule.Properties.EventBusName).toBeUndefined(); // the default bus: a schedule
    const queue = Object.entries(resources(t, 'AWS::SQS::Queue')).find(([, q]) => q.Properties.QueueName === 'heatsink-async-failures')![0];
    expect(rule.Properties.Targets).toHaveLength(1);
    expect(rule.Properties.Targets[0]).toMatchObject({
      RetryPolicy: { MaximumRetryAttempts: 2, MaximumEventAgeInSeconds: 600 },
      DeadLetterConfig: { Arn: { 'Fn::GetAtt': [queue, 'Arn'] } },
    });
    t.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: fnLogicalId('autopilot', t) },
      MaximumRetryAttempts: 0,
      MaximumEventAgeInSeconds: 60,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [queue, 'Arn'] } } },
    });
    t.hasResourceProperties('AWS::Lambda::Permission', {
      FunctionName: { 'Fn::GetAtt': [fnLogicalId('autopilot', t), 'Arn'] },
      Principal: 'events.amazonaws.com',
      SourceArn: { 'Fn::GetAtt': [ruleId, 'Arn'] },
    });
  });

  test('one period at a time; the prefix and the act switch (off by default) in its environment', () => {
    expect(fn().ReservedConcurrentExecutions).toBe(1);
    expect(fn().Environment.Variables).toMatchObject({ HEATSINK_PREFIX: 'heatsink-', HEATSINK_AUTOPILOT_ACT: 'false' });
    expect(fn().Timeout).toBeLessThanOrEqual(60);
  });

  test('its state table: pk/sk, on-demand, point-in-time recovery, deletion protection', () => {
    const table = Object.values(resources(t, 'AWS::DynamoDB::GlobalTable')).find((r) => r.Properties.TableName === 'heatsink-autopilot')!
      .Properties;
    expect(table.KeySchema).toEqual([
      { AttributeName: 'pk', KeyType: 'HASH' },
      { AttributeName: 'sk', KeyType: 'RANGE' },
    ]);
    expect(table.BillingMode).toBe('PAY_PER_REQUEST');
    expect(table.Replicas[0]).toMatchObject({
      PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
      DeletionProtectionEnabled: true,
    });
    expect(table.StreamSpecification).toBeUndefined();
  });

  // The heartbeat breaches on missing data; the gauges do not (the heartbeat covers missing periods).
  test.each([
    ['heatsink-autopilot-failing', EMF_METRICS.autopilotPeriodCompleted, 'Sum', 'LessThanThreshold', 'breaching'],
    ['heatsink-autopilot-paused', EMF_METRICS.autopilotPaused, 'Maximum', 'GreaterThanOrEqualToThreshold', 'notBreaching'],
    ['heatsink-autopilot-out-of-budget', EMF_METRICS.autopilotOutOfBudget, 'Maximum', 'GreaterThanOrEqualToThreshold', 'notBreaching'],
    ['heatsink-autopilot-unproven', EMF_METRICS.autopilotUnproven, 'Maximum', 'GreaterThanOrEqualToThreshold', 'notBreaching'],
  ] as const)('%s: %s %s, %s 1 in 3 five-minute periods in a row, missing data %s, to the alarm topic', (name, metric, stat, op, missing) => {
    const found = Object.values(resources(t, 'AWS::CloudWatch::Alarm')).filter((a) => a.Properties.AlarmName === name);
    expect(found).toHaveLength(1);
    const alarm = found[0].Properties;
    expect(alarm).toMatchObject({
      Namespace: EMF_NAMESPACE,
      MetricName: metric,
      Dimensions: [{ Name: 'Function', Value: 'autopilot' }],
      Statistic: stat,
      Period: 300,
      ComparisonOperator: op,
      Threshold: 1,
      EvaluationPeriods: 3,
      DatapointsToAlarm: 3,
      TreatMissingData: missing,
    });
    const topic = Object.keys(resources(t, 'AWS::SNS::Topic'));
    expect(alarm.AlarmActions).toEqual([{ Ref: topic[0] }]);
    expect(alarm.OKActions).toEqual([{ Ref: topic[0] }]);
    expect(alarm.AlarmDescription).toContain('Runbook: README "Alarms"');
  });
});

test('the act switch: HEATSINK_AUTOPILOT_ACT=true, and the function says it acts', () => {
  const t = synth({ autopilotAct: true }).template;
  const fn = Object.values(resources(t, 'AWS::Lambda::Function')).find((f) => f.Properties.FunctionName === 'heatsink-autopilot')!;
  expect(fn.Properties.Environment.Variables.HEATSINK_AUTOPILOT_ACT).toBe('true');
  expect(fn.Properties.Description).toMatch(/\(acting\)$/);
  const dryRun = Object.values(resources(s.template, 'AWS::Lambda::Function')).find((f) => f.Properties.FunctionName === 'heatsink-autopilot')!;
  expect(dryRun.Properties.Description).toMatch(/\(dry run\)$/);
});

test('AwsSolutions checks pass with the act switch on', () => {
  const { app } = synth({ autopilotAct: true }, true);
  const report = JSON.parse(fs.readFileSync(path.join(app.synth().directory, 'validation-report.json'), 'utf8'));
  const pack = report.pluginReports.find((r: any) => r.pluginName === 'AwsSolutions');
  expect(pack.conclusion).toBe('success');
  expect(pack.violations).toEqual([]);
});

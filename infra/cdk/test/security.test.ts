import { Template } from 'aws-cdk-lib/assertions';
import * as fs from 'fs';
import * as path from 'path';
import { DEFAULT_CONCURRENCY } from '../lib/heatsink-stack';
import { FUNCTION_NAMES } from '../lib/schema';
import { resources, synth, Synth } from './helpers';

let s: Synth;
beforeAll(() => {
  s = synth();
});

const fnId = (name: string, t: Template = s.template) =>
  Object.entries(resources(t, 'AWS::Lambda::Function')).find(([, r]) => r.Properties.FunctionName === `heatsink-${name}`)![0];

describe('authenticated likes API', () => {
  const routesOf = (t: Template) => Object.values(resources(t, 'AWS::ApiGatewayV2::Route')).map((r) => r.Properties);

  test('every route, the POST (write) route above all, has the JWT authorizer', () => {
    const [authorizerId, authorizer] = Object.entries(resources(s.template, 'AWS::ApiGatewayV2::Authorizer'))[0];
    expect(authorizer.Properties).toMatchObject({ AuthorizerType: 'JWT', IdentitySource: ['$request.header.Authorization'] });
    const routes = routesOf(s.template);
    expect(routes.map((r) => r.RouteKey).sort()).toEqual(['GET /posts/{post}', 'POST /posts/{post}/likes']);
    for (const r of routes) {
      expect(r.AuthorizationType).toBe('JWT');
      expect(r.AuthorizerId).toEqual({ Ref: authorizerId });
    }
    expect(routes.filter((r) => r.RouteKey.startsWith('POST'))).toHaveLength(1);
  });

  test('by default the stack creates a Cognito user pool (no self sign-up, MFA) and accepts its tokens', () => {
    const [poolId, pool] = Object.entries(resources(s.template, 'AWS::Cognito::UserPool'))[0];
    expect(pool.Properties).toMatchObject({
      AdminCreateUserConfig: { AllowAdminCreateUserOnly: true },
      MfaConfiguration: 'ON',
      DeletionProtection: 'ACTIVE',
    });
    const clientId = Object.keys(resources(s.template, 'AWS::Cognito::UserPoolClient'))[0];
    const authorizer = Object.values(resources(s.template, 'AWS::ApiGatewayV2::Authorizer'))[0].Properties;
    expect(authorizer.JwtConfiguration.Audience).toEqual([{ Ref: clientId }]);
    expect(JSON.stringify(authorizer.JwtConfiguration.Issuer)).toContain(poolId);
  });

  test('an external issuer and audience replace the user pool', () => {
    const t = synth({ jwtIssuer: { issuer: 'https://login.example.com/', audience: ['likes'] } }).template;
    t.resourceCountIs('AWS::Cognito::UserPool', 0);
    t.hasResourceProperties('AWS::ApiGatewayV2::Authorizer', {
      AuthorizerType: 'JWT',
      JwtConfiguration: { Issuer: 'https://login.example.com/', Audience: ['likes'] },
    });
    for (const r of routesOf(t)) expect(r.AuthorizationType).toBe('JWT');
  });

  test('likes-api has default per-user and per-post limits (the env does not disable them)', () => {
    const vars = resources(s.template, 'AWS::Lambda::Function')[fnId('likes-api')].Properties.Environment.Variables;
    expect(vars.HEATSINK_USER_LIKES_PER_SECOND).toBeUndefined(); // library default 10/s
    expect(vars.HEATSINK_POST_LIKES_PER_SECOND).toBeUndefined(); // library default 2,000/s
    // No variable of any function can switch identity to a header: there is no such switch.
    expect(JSON.stringify(resources(s.template, 'AWS::Lambda::Function'))).not.toMatch(/x-user-id|USER_HEADER|TRUST/i);
  });
});

describe('alarms that page', () => {
  const keyId = () => Object.keys(resources(s.template, 'AWS::KMS::Key'))[0];

  test('the alarm topic is encrypted with a customer-managed key CloudWatch may use', () => {
    const topic = Object.values(resources(s.template, 'AWS::SNS::Topic'))[0].Properties;
    expect(topic.KmsMasterKeyId).toEqual({ 'Fn::GetAtt': [keyId(), 'Arn'] });
    const key = resources(s.template, 'AWS::KMS::Key')[keyId()].Properties;
    expect(key.EnableKeyRotation).toBe(true);
    const cloudwatch = key.KeyPolicy.Statement.filter((st: any) => st.Principal?.Service === 'cloudwatch.amazonaws.com');
    expect(cloudwatch).toHaveLength(1);
    expect([cloudwatch[0].Action].flat().sort()).toEqual(['kms:Decrypt', 'kms:GenerateDataKey*']);
    expect(cloudwatch[0].Effect).toBe('Allow');
    // This account's alarms only.
    expect(cloudwatch[0].Condition).toEqual({ StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } });
    // The topic policy lets CloudWatch publish (this account's alarms only).
    const topicPolicy = Object.values(resources(s.template, 'AWS::SNS::TopicPolicy'))[0].Properties.PolicyDocument;
    expect(topicPolicy.Statement).toContainEqual(
      expect.objectContaining({
        Effect: 'Allow',
        Principal: { Service: 'cloudwatch.amazonaws.com' },
        Action: 'sns:Publish',
        Condition: { StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } },
      }),
    );
    expect(JSON.stringify(s.template.toJSON())).not.toContain('alias/aws/sns');
  });

  const alarms = () => Object.values(resources(s.template, 'AWS::CloudWatch::Alarm')).map((a) => a.Properties);
  const named = (n: string) => alarms().find((a) => a.AlarmName === n)!;

  test('Errors and Throttles alarms on every function', () => {
    for (const name of FUNCTION_NAMES) {
      for (const [suffix, metric] of [
        ['errors', 'Errors'],
        ['throttles', 'Throttles'],
      ]) {
        const a = named(`heatsink-${name}-${suffix}`);
        expect(a).toMatchObject({ Namespace: 'AWS/Lambda', MetricName: metric, Threshold: 1 });
        expect(a.Dimensions).toEqual([{ Name: 'FunctionName', Value: { Ref: fnId(name) } }]);
      }
    }
  });

  test('API 5xx and p99 latency, replication lag, replication failures and iterator ages', () => {
    expect(named('heatsink-likes-api-5xx')).toMatchObject({ Namespace: 'AWS/ApiGateway', MetricName: '5xx' });
    expect(named('heatsink-likes-api-p99-latency')).toMatchObject({
      Namespace: 'AWS/ApiGateway',
      MetricName: 'Latency',
      ExtendedStatistic: 'p99',
    });
    expect(named('heatsink-liked-kinesis-replication-lag')).toMatchObject({
      Namespace: 'AWS/DynamoDB',
      MetricName: 'AgeOfOldestUnreplicatedRecord',
      Dimensions: [{ Name: 'TableName', Value: 'heatsink-liked' }],
    });
    expect(named('heatsink-liked-kinesis-replication-failed').MetricName).toBe('FailedToReplicateRecordCount');
    expect(named('heatsink-like-events-iterator-age').MetricName).toBe('GetRecords.IteratorAgeMilliseconds');
    expect(named('heatsink-likes-aggregator-iterator-age').MetricName).toBe('IteratorAge');
    // No Kinesis destination with the DynamoDB Streams source: no replication alarms either.
    const ddb = Object.values(synth({ likeEventsSource: 'dynamodb-streams' }).template.findResources('AWS::CloudWatch::Alarm'));
    expect(ddb.map((a) => a.Properties.AlarmName)).not.toContain('heatsink-liked-kinesis-replication-lag');
  });

  test('parked batches: how many and how old (replay before the source forgets them)', () => {
    expect(named('heatsink-stream-failures')).toMatchObject({ Namespace: 'AWS/SQS', MetricName: 'ApproximateNumberOfMessagesVisible' });
    expect(named('heatsink-stream-failures-age')).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateAgeOfOldestMessage',
      Threshold: 12 * 3600,
      Dimensions: [{ Name: 'QueueName', Value: expect.anything() }],
    });
  });

  test('heartbeats of the scheduled functions breach on missing data', () => {
    const metric: Record<string, string> = { 'hotkey-controller': 'HotKeys', 'count-rebuilder': 'CounterRebuildCompleted' };
    for (const fn of ['hotkey-controller', 'count-rebuilder']) {
      const a = named(`heatsink-${fn}-heartbeat`);
      expect(a).toMatchObject({
        Namespace: 'heatsink',
        MetricName: metric[fn],
        Statistic: 'SampleCount',
        ComparisonOperator: 'LessThanThreshold',
        Threshold: 1,
        TreatMissingData: 'breaching',
        Dimensions: [{ Name: 'Function', Value: fn }],
      });
    }
  });

  test('every alarm pages (topic on ALARM and OK) and has a runbook row in infra/README.md', () => {
    const topicId = Object.keys(resources(s.template, 'AWS::SNS::Topic'))[0];
    const readme = fs.readFileSync(path.join(__dirname, '..', '..', 'README.md'), 'utf8');
    const runbook = readme.slice(readme.indexOf('### Alarms and what to do'));
    // Every backticked name in a row's first cell; `<x>` is any name part, `[-<x>]` an optional one.
    const rows = [...runbook.matchAll(/^\| ([^|]+)\|/gm)].flatMap((m) => [...m[1].matchAll(/`([^`]+)`/g)].map((n) => n[1]));
    const escape = (t: string) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const patterns = rows.map(
      (row) =>
        new RegExp(
          '^heatsink-' +
            row
              .split(/(\[-<[a-z-]+>\]|<[a-z-]+>)/)
              .map((part) => (part.startsWith('[-<') ? '(-[a-z-]+)?' : part.startsWith('<') ? '[a-z-]+' : escape(part)))
              .join('') +
            '$',
        ),
    );
    for (const a of [...alarms(), ...Object.values(synth({ likeEventsSource: 'dynamodb-streams' }).template.findResources('AWS::CloudWatch::Alarm')).map((x) => x.Properties)]) {
      expect(a.AlarmActions).toEqual([{ Ref: expect.any(String) }]);
      expect(a.OKActions).toHaveLength(1);
      expect(a.AlarmDescription).toContain('Runbook: README "Alarms"');
      const covered = patterns.some((p) => p.test(a.AlarmName));
      if (!covered) throw new Error(`${a.AlarmName} has no row in the runbook (infra/README.md)`);
    }
    expect(alarms()[0].AlarmActions).toEqual([{ Ref: topicId }]);
  });
});

test('the API access log keeps no source IP unless asked to', () => {
  const format = (t: Template) =>
    JSON.parse(Object.values(resources(t, 'AWS::ApiGatewayV2::Stage'))[0].Properties.AccessLogSettings.Format);
  expect(format(s.template)).toEqual({
    requestId: '$context.requestId',
    requestTime: '$context.requestTime',
    routeKey: '$context.routeKey',
    status: '$context.status',
    responseLength: '$context.responseLength',
  });
  expect(JSON.stringify(s.template.toJSON())).not.toContain('sourceIp');
  expect(format(synth({ accessLogSourceIp: true }).template).ip).toBe('$context.identity.sourceIp');
});

test('logs without personal data: capacity lines sampled, the liked table (keyed by user) hashed', () => {
  for (const f of Object.values(resources(s.template, 'AWS::Lambda::Function'))) {
    const vars = f.Properties.Environment.Variables;
    expect(Number(vars.HEATSINK_CAPACITY_LOG_SAMPLE)).toBeGreaterThan(1);
    const clear: string[] = vars.HEATSINK_CAPACITY_LOG_CLEAR_TABLES.split(',');
    expect(clear).not.toContain('heatsink-liked');
    expect(clear.sort()).toEqual(['heatsink-autopilot', 'heatsink-counters', 'heatsink-hotkeys', 'heatsink-leases', 'heatsink-posts']);
  }
  for (const g of Object.values(resources(s.template, 'AWS::Logs::LogGroup'))) expect(g.Properties.RetentionInDays).toBe(30);
});

describe('resilience settings', () => {
  const fn = (name: string) => resources(s.template, 'AWS::Lambda::Function')[fnId(name)].Properties;

  test('reserved concurrency on every function: a cap on likes-api, a reserve for the aggregator, 1 for the singletons', () => {
    for (const name of FUNCTION_NAMES) expect(fn(name).ReservedConcurrentExecutions).toBe(DEFAULT_CONCURRENCY[name]);
    expect(fn('count-rebuilder').ReservedConcurrentExecutions).toBe(1);
    expect(fn('hotkey-controller').ReservedConcurrentExecutions).toBe(1);
    expect(fn('autopilot').ReservedConcurrentExecutions).toBe(1);
  });

  test('the EventBridge-invoked functions: no async retries, a failure destination', () => {
    const queue = Object.entries(resources(s.template, 'AWS::SQS::Queue')).find(
      ([, q]) => q.Properties.QueueName === 'heatsink-async-failures',
    )![0];
    for (const name of ['count-rebuilder', 'hotkey-controller', 'autopilot']) {
      s.template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
        FunctionName: { Ref: fnId(name) },
        MaximumRetryAttempts: 0,
        DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [queue, 'Arn'] } } },
      });
    }
    // Every EventBridge target parks undeliverable events in the same queue.
    for (const rule of Object.values(resources(s.template, 'AWS::Events::Rule'))) {
      for (const target of rule.Properties.Targets) {
        expect(target.DeadLetterConfig).toEqual({ Arn: { 'Fn::GetAtt': [queue, 'Arn'] } });
      }
    }
  });

  test('deletion protection on every table', () => {
    for (const t of Object.values(resources(s.template, 'AWS::DynamoDB::GlobalTable'))) {
      expect(t.Properties.Replicas[0].DeletionProtectionEnabled).toBe(true);
    }
  });

  test('no name prefix in IAM resources or event patterns', () => {
    const json = JSON.stringify(
      [resources(s.template, 'AWS::IAM::Policy'), resources(s.template, 'AWS::Events::Rule')].map((r) =>
        Object.values(r).map((x) => x.Properties),
      ),
    );
    expect(json).not.toContain('"prefix"');
    // The only wildcards: the creation timestamp at the end of DynamoDB's managed rule names.
    for (const m of json.matchAll(/[^"]*\*[^"]*/g)) {
      // ... and X-Ray's "*" (its two actions take no resource).
      expect(m[0]).toMatch(/^:insight-rule\/DynamoDBContributorInsights-(PKC|PKT)-heatsink-counters-\*$|^kms:GenerateDataKey\*$|^\*$/);
    }
    const star = json.match(/"Action":\[[^\]]*\],"Effect":"Allow","Resource":"\*"/g) ?? [];
    for (const st of star) expect(st).toContain('"xray:PutTraceSegments","xray:PutTelemetryRecords"');
  });
});


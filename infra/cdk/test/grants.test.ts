/**
 * Grants derived from calls: every role's grants are exactly what infra/grants.json says the
 * function calls (recorded by tests/tests/it/grants.rs) plus what the Lambda service does with
 * the role (event source mapping reads, failure destinations), plus its own log stream. A missing
 * grant fails (AccessDenied in production) and so does an unused one.
 */
import { Template } from 'aws-cdk-lib/assertions';
import * as fs from 'fs';
import * as path from 'path';
import { LikeEventsSource } from '../lib/heatsink-stack';
import { FUNCTION_NAMES } from '../lib/schema';
import { synth } from './helpers';

interface Grant {
  action: string;
  resource: string;
  modes?: LikeEventsSource[];
}
const manifest: { calls: Record<string, Grant[]>; platform: Record<string, Grant[]> } = JSON.parse(
  fs.readFileSync(path.join(__dirname, '..', '..', 'grants.json'), 'utf8'),
);
const PREFIX = 'heatsink-';

/** What a role must hold in `mode`: `action resource` strings. */
export function expected(fn: string, mode: LikeEventsSource): string[] {
  return [...(manifest.calls[fn] ?? []), ...(manifest.platform[fn] ?? [])]
    .filter((g) => !g.modes || g.modes.includes(mode))
    .map((g) => `${g.action} ${g.resource.replace('<prefix>', PREFIX)}`)
    .sort();
}

/** A resource of the template as a logical resource name (`table/liked`, `insight-rule/...`). */
function logical(t: Template, res: any): string {
  const all = t.toJSON().Resources as Record<string, any>;
  if (res?.['Fn::GetAtt']) {
    const [id, attr] = res['Fn::GetAtt'];
    const r = all[id];
    const p = r.Properties;
    switch (r.Type) {
      case 'AWS::DynamoDB::GlobalTable':
        return `table/${p.TableName.slice(PREFIX.length)}${attr === 'StreamArn' ? '/stream' : ''}`;
      case 'AWS::Kinesis::Stream':
        return `stream/${p.Name.slice(PREFIX.length)}`;
      case 'AWS::SQS::Queue':
        return `queue/${p.QueueName.slice(PREFIX.length)}`;
      case 'AWS::Logs::LogGroup':
        return `log-group/${p.LogGroupName}`;
      case 'AWS::Events::EventBus':
        return `event-bus/${p.Name.slice(PREFIX.length)}`;
    }
    throw new Error(`unexpected resource ${id} (${r.Type})`);
  }
  if (res?.['Fn::Join']) {
    const [sep, parts] = res['Fn::Join'];
    const text = parts.map((x: any) => (typeof x === 'string' ? x : '{}')).join(sep);
    const rule = text.match(/:insight-rule\/(.*)$/);
    if (rule) return `insight-rule/${rule[1]}`;
    const index = parts.find((x: any) => x?.['Fn::GetAtt']);
    if (index && text.includes('/index/')) return `${logical(t, index)}/index/${text.split('/index/')[1]}`;
  }
  throw new Error(`unexpected resource ${JSON.stringify(res)}`);
}

/** Every (action resource) the function's role holds, its log stream excepted. */
export function granted(t: Template, fn: string): string[] {
  const roleId = Object.entries(t.findResources('AWS::IAM::Role')).find(([, r]) =>
    String(r.Properties.Description ?? '').startsWith(`${PREFIX}${fn}:`),
  )![0];
  const out: string[] = [];
  for (const p of Object.values(t.findResources('AWS::IAM::Policy'))) {
    if (!p.Properties.Roles.some((r: any) => r.Ref === roleId)) continue;
    for (const st of p.Properties.PolicyDocument.Statement) {
      expect(st.Effect).toBe('Allow');
      expect(st.Condition).toBeUndefined();
      for (const res of [st.Resource].flat()) {
        const name = logical(t, res);
        for (const action of [st.Action].flat()) {
          if (name === `log-group//aws/lambda/${PREFIX}${fn}`) {
            expect(['logs:CreateLogStream', 'logs:PutLogEvents']).toContain(action);
            continue;
          }
          out.push(`${action} ${name}`);
        }
      }
    }
  }
  return [...new Set(out)].sort();
}

describe.each<LikeEventsSource>(['kinesis', 'dynamodb-streams'])('grants are the calls (%s source)', (mode) => {
  let t: Template;
  beforeAll(() => {
    t = synth({ likeEventsSource: mode }).template;
  });
  test.each([...FUNCTION_NAMES])('%s', (fn) => {
    const want = expected(fn, mode);
    const have = granted(t, fn);
    const missing = want.filter((g) => !have.includes(g));
    const unused = have.filter((g) => !want.includes(g));
    expect({ missing, unused }).toEqual({ missing: [], unused: [] });
  });
});

test('every function of the stack is in the manifest, and nothing else is', () => {
  expect(Object.keys(manifest.calls).sort()).toEqual([...FUNCTION_NAMES].sort());
  for (const fn of Object.keys(manifest.platform)) expect(FUNCTION_NAMES).toContain(fn as any);
});

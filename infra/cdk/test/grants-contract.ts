/**
 * The grants contract's reading of a template (used by grants.test.ts and examples.test.ts).
 *
 * Grants derived from calls: every role's grants are exactly what infra/grants.json says the
 * function calls (recorded by tests/tests/it/grants.rs) plus what the Lambda service does with
 * the role (event source mapping reads, failure destinations), plus its own log stream. A missing
 * grant fails (AccessDenied in production) and so does an unused one.
 */
import { Template } from 'aws-cdk-lib/assertions';
import * as fs from 'fs';
import * as path from 'path';
import { LikeEventsSource } from '../lib/heatsink-stack';

interface Grant {
  action: string;
  resource: string;
  modes?: LikeEventsSource[];
  /** Granted only when the function's act switch is on (the autopilot's reshards). */
  act?: boolean;
}
export interface Example {
  /** The like-events source its entries apply in (none for an example without one: every entry applies). */
  source?: LikeEventsSource;
  prefix: string;
  functions: string[];
  rename?: Record<string, string>;
  rename_by_function?: Record<string, Record<string, string>>;
  /** A logical resource that stands for several there (`table/owner`: each owner and spare table). */
  rename_each?: Record<string, string[]>;
}
export const manifest: {
  calls: Record<string, Grant[]>;
  platform: Record<string, Grant[]>;
  examples: Record<string, Example>;
} = JSON.parse(
  fs.readFileSync(path.join(__dirname, '..', '..', 'grants.json'), 'utf8'),
);
const PREFIX = 'heatsink-';

/** `resource` with the longest matching `rename` entry applied (`table/liked` -> `table/orders`, its index and stream too). */
function renamed(resource: string, rename: Record<string, string>): string {
  for (const old of Object.keys(rename).sort((a, b) => b.length - a.length)) {
    if (resource === old || resource.startsWith(`${old}/`)) return rename[old] + resource.slice(old.length);
  }
  return resource;
}

/** `resource` as each of the resources it stands for (`rename_each`; its stream too), else itself. */
function each(resource: string, rename: Record<string, string[]>): string[] {
  for (const old of Object.keys(rename).sort((a, b) => b.length - a.length)) {
    if (resource === old || resource.startsWith(`${old}/`)) return rename[old].map((name) => name + resource.slice(old.length));
  }
  return [resource];
}

/**
 * What a role must hold in `mode`: `action resource` strings (for an example: its names). The
 * entries marked `act` only when the act switch is on (`act`), never in a default (dry-run) deployment.
 */
export function expected(fn: string, mode: LikeEventsSource, example?: Example, act = false): string[] {
  const prefix = example?.prefix ?? PREFIX;
  const rename = { ...(example?.rename ?? {}), ...(example?.rename_by_function?.[fn] ?? {}) };
  const out = [...(manifest.calls[fn] ?? []), ...(manifest.platform[fn] ?? [])]
    .filter((g) => !g.modes || g.modes.includes(mode))
    .filter((g) => !g.act || act)
    .flatMap((g) => each(renamed(g.resource.replace('<prefix>', prefix), rename), example?.rename_each ?? {}).map((r) => `${g.action} ${r}`));
  return [...new Set(out)].sort();
}

/** A deployment's name without its prefix (a user's own table keeps its whole name). */
const strip = (name: string, prefix: string) => (name.startsWith(prefix) ? name.slice(prefix.length) : name);

/** A resource of the template as a logical resource name (`table/liked`, `insight-rule/...`). */
function logical(t: Template, res: any, prefix = PREFIX): string {
  if (res === '*') return '*';
  const all = t.toJSON().Resources as Record<string, any>;
  if (res?.['Fn::GetAtt']) {
    const [id, attr] = res['Fn::GetAtt'];
    const r = all[id];
    const p = r.Properties;
    switch (r.Type) {
      case 'AWS::DynamoDB::GlobalTable':
        return `table/${strip(p.TableName, prefix)}${attr === 'StreamArn' ? '/stream' : ''}`;
      case 'AWS::Kinesis::Stream':
        return `stream/${strip(p.Name, prefix)}`;
      case 'AWS::SQS::Queue':
        return `queue/${strip(p.QueueName, prefix)}`;
      case 'AWS::Logs::LogGroup':
        return `log-group/${p.LogGroupName}`;
      case 'AWS::Events::EventBus':
        return `event-bus/${strip(p.Name, prefix)}`;
      case 'AWS::KMS::Key': {
        // A key by its alias (`alias/<prefix>async-failures` -> `key/async-failures`).
        const alias = Object.values(all).find(
          (a: any) => a.Type === 'AWS::KMS::Alias' && JSON.stringify(a.Properties.TargetKeyId).includes(`"${id}"`),
        );
        if (alias) return `key/${strip(alias.Properties.AliasName.replace(/^alias\//, ''), prefix)}`;
        break;
      }
    }
    throw new Error(`unexpected resource ${id} (${r.Type})`);
  }
  if (res?.['Fn::Join']) {
    const [sep, parts] = res['Fn::Join'];
    const text = parts.map((x: any) => (typeof x === 'string' ? x : '{}')).join(sep);
    const rule = text.match(/:insight-rule\/(.*)$/);
    if (rule) return `insight-rule/${rule[1]}`;
    const index = parts.find((x: any) => x?.['Fn::GetAtt']);
    if (index && text.includes('/index/')) return `${logical(t, index, prefix)}/index/${text.split('/index/')[1]}`;
  }
  throw new Error(`unexpected resource ${JSON.stringify(res)}`);
}

/** Every (action resource) the function's role holds, its log stream excepted. */
export function granted(t: Template, fn: string, prefix = PREFIX): string[] {
  const roleId = Object.entries(t.findResources('AWS::IAM::Role')).find(([, r]) =>
    String(r.Properties.Description ?? '').startsWith(`${prefix}${fn}:`),
  )![0];
  const out: string[] = [];
  for (const p of Object.values(t.findResources('AWS::IAM::Policy'))) {
    if (!p.Properties.Roles.some((r: any) => r.Ref === roleId)) continue;
    for (const st of p.Properties.PolicyDocument.Statement) {
      expect(st.Effect).toBe('Allow');
      expect(st.Condition).toBeUndefined();
      for (const res of [st.Resource].flat()) {
        const name = logical(t, res, prefix);
        for (const action of [st.Action].flat()) {
          if (name === `log-group//aws/lambda/${prefix}${fn}`) {
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


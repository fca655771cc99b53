/**
 * The synthesized template agrees with the Rust schema (`heatsink schema --json`).
 *
 * `make -C infra schema` (run by `make -C infra test`) exports the JSON to infra/build/schema.json;
 * HEATSINK_SCHEMA_JSON points elsewhere; failing both, the test runs target/debug/heatsink itself.
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { resources, synth, Synth } from './helpers';

interface Key {
  name: string;
  type: string;
}
interface Schema {
  prefix: string;
  tables: {
    table: string;
    name: string;
    partition_key: Key;
    sort_key: Key | null;
    gsis: { name: string; partition_key: Key; sort_key: Key | null }[];
    stream: string | null;
    ttl_attribute: string | null;
  }[];
  streams: { logical: string; name: string; shards: number }[];
}

function loadSchema(): Schema {
  const repo = path.resolve(__dirname, '..', '..', '..');
  const file = process.env.HEATSINK_SCHEMA_JSON || path.join(repo, 'infra', 'build', 'schema.json');
  if (fs.existsSync(file)) return JSON.parse(fs.readFileSync(file, 'utf8'));
  const bin = path.join(repo, 'target', 'debug', 'heatsink');
  if (fs.existsSync(bin)) return JSON.parse(execFileSync(bin, ['schema', '--json'], { encoding: 'utf8' }));
  throw new Error(`no schema: run \`make -C infra schema\` (writes ${file}) or build heatsink-cli`);
}

const schema = loadSchema();
let s: Synth;
beforeAll(() => {
  // Synthesize under the schema's own prefix, so a prefix change on either side is caught too.
  s = synth({ prefix: schema.prefix });
});

const keySchema = (pk: Key, sk: Key | null) => [
  { AttributeName: pk.name, KeyType: 'HASH' },
  ...(sk ? [{ AttributeName: sk.name, KeyType: 'RANGE' }] : []),
];

test('the schema export is not empty', () => {
  expect(schema.tables.length).toBeGreaterThan(0);
  expect(schema.streams.length).toBeGreaterThan(0);
});

test('the template has exactly the schema\'s tables', () => {
  const names = Object.values(resources(s.template, 'AWS::DynamoDB::GlobalTable')).map((r) => r.Properties.TableName);
  expect(names.sort()).toEqual(schema.tables.map((t) => t.name).sort());
  for (const t of schema.tables) expect(t.name).toBe(`${schema.prefix}${t.table}`);
});

describe.each(schema.tables.map((t) => [t.name, t] as const))('table %s', (name, table) => {
  const props = () =>
    Object.values(resources(s.template, 'AWS::DynamoDB::GlobalTable')).find((r) => r.Properties.TableName === name)!
      .Properties;

  test('key schema and attribute types', () => {
    const p = props();
    expect(p.KeySchema).toEqual(keySchema(table.partition_key, table.sort_key));
    const keys = [table.partition_key, table.sort_key, ...table.gsis.flatMap((g) => [g.partition_key, g.sort_key])]
      .filter((k): k is Key => k !== null)
      .map((k) => ({ AttributeName: k.name, AttributeType: k.type }));
    const unique = [...new Map(keys.map((k) => [k.AttributeName, k])).values()];
    expect([...p.AttributeDefinitions].sort(byName)).toEqual(unique.sort(byName));
  });

  test('global secondary indexes', () => {
    const p = props();
    const gsis = (p.GlobalSecondaryIndexes ?? []).map((g: any) => ({ name: g.IndexName, keys: g.KeySchema }));
    expect(gsis).toEqual(table.gsis.map((g) => ({ name: g.name, keys: keySchema(g.partition_key, g.sort_key) })));
  });

  test('change stream', () => {
    expect(props().StreamSpecification?.StreamViewType ?? null).toBe(table.stream);
  });

  test('TTL attribute', () => {
    const ttl = props().TimeToLiveSpecification;
    expect(ttl ? (ttl.Enabled ? ttl.AttributeName : null) : null).toBe(table.ttl_attribute);
  });
});

test('the template has exactly the schema\'s Kinesis streams, with the same shard counts', () => {
  const streams = Object.values(resources(s.template, 'AWS::Kinesis::Stream')).map((r) => ({
    name: r.Properties.Name,
    shards: r.Properties.ShardCount,
  }));
  expect(streams.sort(byName)).toEqual(schema.streams.map((x) => ({ name: x.name, shards: x.shards })).sort(byName));
});

function byName(a: any, b: any): number {
  const x = a.AttributeName ?? a.name;
  const y = b.AttributeName ?? b.name;
  return x < y ? -1 : x > y ? 1 : 0;
}

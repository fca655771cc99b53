/**
 * Grants derived from calls: every role's grants are exactly what infra/grants.json says the
 * function calls (recorded by tests/tests/it/grants.rs) plus what the Lambda service does with
 * the role (event source mappings, failure destinations), plus its own log stream. A missing
 * grant fails (AccessDenied in production) and so does an unused one. Entries marked `act` (the
 * autopilot's reshards) are granted only with the act switch on: a default synth grants exactly
 * the others.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { LikeEventsSource } from '../lib/heatsink-stack';
import { FUNCTION_NAMES } from '../lib/schema';
import { expected, granted, manifest } from './grants-contract';
import { synth } from './helpers';

describe.each<[LikeEventsSource, boolean]>([
  ['kinesis', false],
  ['dynamodb-streams', false],
  ['kinesis', true],
  ['dynamodb-streams', true],
])('grants are the calls (%s source, autopilot act %s)', (mode, act) => {
  let t: Template;
  beforeAll(() => {
    t = synth({ likeEventsSource: mode, ...(act ? { autopilotAct: true } : {}) }).template;
  });
  test.each([...FUNCTION_NAMES])('%s', (fn) => {
    const want = expected(fn, mode, undefined, act);
    const have = granted(t, fn);
    const missing = want.filter((g) => !have.includes(g));
    const unused = have.filter((g) => !want.includes(g));
    expect({ missing, unused }).toEqual({ missing: [], unused: [] });
  });
});

/**
 * Functions of blocks no photo-app stack deploys (the slot directory's autopilot): each is checked
 * on an example that deploys it (examples.test.ts), under the example's names.
 */
const BLOCK_ONLY = ['directory-autopilot'];

test('every function of the stack, and every block-only one, is in the manifest, and nothing else is', () => {
  expect(Object.keys(manifest.calls).sort()).toEqual([...FUNCTION_NAMES, ...BLOCK_ONLY].sort());
  for (const fn of Object.keys(manifest.platform)) expect([...FUNCTION_NAMES, ...BLOCK_ONLY]).toContain(fn as any);
  for (const fn of BLOCK_ONLY) {
    expect(manifest.platform[fn]).toBeDefined();
    expect(Object.values(manifest.examples).some((e) => e.functions.includes(fn))).toBe(true);
  }
});

test('only the autopilots have act entries, and only on their own calls', () => {
  const act = Object.entries(manifest.calls).flatMap(([fn, gs]) => gs.filter((g: any) => g.act !== undefined).map((g: any) => [fn, g]));
  expect(act.length).toBeGreaterThan(0);
  for (const [fn, g] of act) {
    expect(['autopilot', 'directory-autopilot']).toContain(fn);
    expect(g.act).toBe(true);
  }
  for (const fn of ['autopilot', 'directory-autopilot']) expect(act.some(([f]) => f === fn)).toBe(true);
  for (const gs of Object.values(manifest.platform)) for (const g of gs as any[]) expect(g.act).toBeUndefined();
});

describe('the autopilot may reshard only with the act switch on', () => {
  const reshards = ['kinesis:SplitShard', 'kinesis:MergeShards'];
  const actions = (t: Template) => granted(t, 'autopilot').map((g) => g.split(' ')[0]);
  const env = (t: Template) =>
    Object.values(t.findResources('AWS::Lambda::Function')).find((f) => f.Properties.FunctionName === 'heatsink-autopilot')!.Properties
      .Environment.Variables;

  test.each<LikeEventsSource>(['kinesis', 'dynamodb-streams'])('default (%s source): a dry run, no SplitShard or MergeShards anywhere', (mode) => {
    const t = synth({ likeEventsSource: mode }).template;
    expect(env(t).HEATSINK_AUTOPILOT_ACT).toBe('false');
    expect(actions(t)).not.toEqual(expect.arrayContaining([reshards[0]]));
    expect(actions(t)).not.toEqual(expect.arrayContaining([reshards[1]]));
    // No role of the stack may reshard.
    const json = JSON.stringify(t.findResources('AWS::IAM::Policy'));
    for (const a of reshards) expect(json).not.toContain(a);
  });

  test.each<LikeEventsSource>(['kinesis', 'dynamodb-streams'])('autopilotAct (%s source): SplitShard and MergeShards on like-events, nothing else more', (mode) => {
    const off = synth({ likeEventsSource: mode }).template;
    const on = synth({ likeEventsSource: mode, autopilotAct: true }).template;
    expect(env(on).HEATSINK_AUTOPILOT_ACT).toBe('true');
    const added = granted(on, 'autopilot').filter((g) => !granted(off, 'autopilot').includes(g));
    expect(added.sort()).toEqual(reshards.map((a) => `${a} stream/like-events`).sort());
    // Only the autopilot's role changes.
    for (const fn of FUNCTION_NAMES.filter((f) => f !== 'autopilot')) expect(granted(on, fn)).toEqual(granted(off, fn));
  });
});

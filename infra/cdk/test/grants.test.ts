/**
 * Grants derived from calls: every role's grants are exactly what infra/grants.json says the
 * function calls (recorded by tests/tests/it/grants.rs) plus what the Lambda service does with
 * the role (event source mapping reads, failure destinations), plus its own log stream. A missing
 * grant fails (AccessDenied in production) and so does an unused one.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { LikeEventsSource } from '../lib/heatsink-stack';
import { FUNCTION_NAMES } from '../lib/schema';
import { expected, granted, manifest } from './grants-contract';
import { synth } from './helpers';

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

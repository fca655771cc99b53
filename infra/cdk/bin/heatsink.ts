#!/usr/bin/env node
/**
 * The heatsink CDK app.
 *
 * Context (cdk.json, or `-c key=value`):
 *   heatsink:prefix                    resource name prefix (default `heatsink-`)
 *   heatsink:architecture              arm64 | x86_64 (default arm64)
 *   heatsink:lambdaDir                 where the `<name>/bootstrap.zip` files are (default: the
 *                                      `make lambdas` output for the architecture)
 *   heatsink:contributorInsightsMode   ACCESSED_AND_THROTTLED_KEYS | THROTTLED_KEYS on every table and GSI
 *                                      (default: accessed keys where the controller acts, throttled elsewhere)
 *   heatsink:hotPartitionFraction      alarm threshold as a fraction of the partition ceiling
 *   heatsink:likeEventsSource          kinesis | dynamodb-streams: likes-aggregator's one event source
 *                                      (default kinesis: like-events fed by the table's Kinesis
 *                                      streaming destination; dynamodb-streams: the table's own stream)
 *   heatsink:autopilotAct              true: the autopilot splits and merges like-events' shards (and
 *                                      its role may); default false: a dry run that only reports what
 *                                      it would do
 *   heatsink:placeholderCode           true: synthesize without built functions (never deploy this)
 */
import { App, Tags, Validations, aws_lambda as lambda } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ContributorInsightsMode, HeatsinkStack, LIKE_EVENTS_SOURCES, LikeEventsSource } from '../lib/heatsink-stack';
import { FunctionName } from '../lib/schema';

const app = new App();
const ctx = (key: string): string | undefined => {
  const v = app.node.tryGetContext(`heatsink:${key}`);
  return v === undefined || v === null ? undefined : String(v);
};

const arch = ctx('architecture') ?? 'arm64';
if (arch !== 'arm64' && arch !== 'x86_64') throw new Error(`heatsink:architecture must be arm64 or x86_64, not ${arch}`);
const repoRoot = path.resolve(__dirname, '..', '..', '..');
const lambdaDir = path.resolve(
  ctx('lambdaDir') ?? path.join(repoRoot, 'target', arch === 'arm64' ? 'lambda' : 'lambda-x86_64'),
);
const placeholder = ctx('placeholderCode') === 'true';
const likeEventsSource = ctx('likeEventsSource') ?? 'kinesis';
if (!(LIKE_EVENTS_SOURCES as readonly string[]).includes(likeEventsSource)) {
  throw new Error(`heatsink:likeEventsSource must be ${LIKE_EVENTS_SOURCES.join(' or ')}, not ${likeEventsSource}`);
}

let placeholderDir: string | undefined;
const code = (name: FunctionName): lambda.Code => {
  const zip = path.join(lambdaDir, name, 'bootstrap.zip');
  if (fs.existsSync(zip)) return lambda.Code.fromAsset(zip);
  if (!placeholder) {
    throw new Error(
      `${zip} is missing: run \`make lambdas\` first (or synthesize with -c heatsink:placeholderCode=true to check the template only).`,
    );
  }
  if (!placeholderDir) {
    placeholderDir = fs.mkdtempSync(path.join(os.tmpdir(), 'heatsink-placeholder-'));
    fs.writeFileSync(path.join(placeholderDir, 'bootstrap'), '#!/bin/sh\necho "placeholder: run make lambdas" >&2\nexit 1\n', {
      mode: 0o755,
    });
  }
  return lambda.Code.fromAsset(placeholderDir);
};

const autopilotAct = ctx('autopilotAct') ?? 'false';
if (autopilotAct !== 'true' && autopilotAct !== 'false') throw new Error(`heatsink:autopilotAct must be true or false, not ${autopilotAct}`);

const fraction = ctx('hotPartitionFraction');
const stack = new HeatsinkStack(app, 'Heatsink', {
  prefix: ctx('prefix'),
  code,
  architecture: arch === 'arm64' ? lambda.Architecture.ARM_64 : lambda.Architecture.X86_64,
  contributorInsightsMode: ctx('contributorInsightsMode') as ContributorInsightsMode | undefined,
  hotPartitionFraction: fraction === undefined ? undefined : Number(fraction),
  likeEventsSource: likeEventsSource as LikeEventsSource,
  autopilotAct: autopilotAct === 'true',
  env: { account: process.env.CDK_DEFAULT_ACCOUNT, region: process.env.CDK_DEFAULT_REGION },
});
Tags.of(stack).add('project', 'heatsink');
Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));

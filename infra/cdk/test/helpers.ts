import { App, Validations, aws_lambda as lambda } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { HeatsinkStack, HeatsinkStackProps } from '../lib/heatsink-stack';

let placeholder: string | undefined;

/** A directory holding a dummy `bootstrap`: synth tests need no built functions, no Docker. */
export function placeholderCode(): lambda.Code {
  if (!placeholder) {
    placeholder = fs.mkdtempSync(path.join(os.tmpdir(), 'heatsink-test-code-'));
    fs.writeFileSync(path.join(placeholder, 'bootstrap'), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
  }
  return lambda.Code.fromAsset(placeholder);
}

export interface Synth {
  readonly app: App;
  readonly stack: HeatsinkStack;
  readonly template: Template;
}

export function synth(props: Partial<HeatsinkStackProps> = {}, nag = false): Synth {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new HeatsinkStack(app, 'Heatsink', { code: () => placeholderCode(), ...props });
  if (nag) Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, stack, template: Template.fromStack(stack) };
}

/** Resources of one type, by logical id. */
export function resources(template: Template, type: string): Record<string, any> {
  return template.findResources(type);
}

/**
 * The function (or role name) a policy resource belongs to, from its role's description
 * (`<prefix><function>: least-privilege execution role`) or name, without prefix and dashes
 * (`likesapi`): what the tests key grants by, whatever the construct tree.
 */
export function policyOwner(template: Template, policy: any, prefix = 'heatsink-'): string {
  const roles = template.findResources('AWS::IAM::Role');
  const ref = policy.Properties.Roles[0].Ref;
  const role = roles[ref].Properties;
  const name = String(role.Description ?? '').split(':')[0] || String(role.RoleName ?? ref);
  return name.replace(prefix, '').replace(/-/g, '');
}

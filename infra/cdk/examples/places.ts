#!/usr/bin/env node
/**
 * A team's geohash `places` slot directory, governed by the directory autopilot. Nothing here is
 * the photo app: the block takes your directory and your owner tables.
 *
 * `places-slots` maps key-slot ranges of the places' geohash keys to owner tables
 * (`heatsink::slots`, ordered keying); `places-a` and `places-b` own the ranges today and
 * `places-c` is an empty spare a move may fill. Every owner has a `NEW_AND_OLD_IMAGES` stream (a
 * move catches up on the source's changes from it). The autopilot reads each owner's consumed write
 * capacity from CloudWatch every 5 minutes and reports which ranges it would move off a hotter
 * owner: a dry run, whose role cannot write the directory's entries or any owner's items. Set
 * `act: true` (context `places:act=true`) to let it move.
 *
 *   npx cdk synth --app "npx ts-node --prefer-ts-exts examples/places.ts" -c heatsink:placeholderCode=true
 *
 * (`make lambdas` builds the function; without it, placeholder code lets the template be checked.)
 */
import { App, RemovalPolicy, Stack, StackProps, Validations, aws_dynamodb as dynamodb } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { Construct } from 'constructs';
import * as path from 'path';
import { AlarmTopic, CodeSource, DirectoryAutopilot } from '../lib';
import { codeFrom } from './orders';

export interface PlacesStackProps extends StackProps {
  /** Where each function's `bootstrap.zip` comes from. */
  readonly code: CodeSource;
  /** Let the autopilot move slot ranges (and its role write the directory and the owners). @default false */
  readonly act?: boolean;
}

export class PlacesStack extends Stack {
  public readonly directory: dynamodb.TableV2;
  /** places-a, places-b and the spare places-c. */
  public readonly owners: dynamodb.TableV2[];
  public readonly autopilot: DirectoryAutopilot;

  constructor(scope: Construct, id: string, props: PlacesStackProps) {
    super(scope, id, props);
    // The team's slot directory (not heatsink's): its entries, and the autopilot's state and kill switch.
    this.directory = new dynamodb.TableV2(this, 'Directory', {
      tableName: 'places-slots',
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
      billing: dynamodb.Billing.onDemand(),
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      deletionProtection: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    // The owner tables the directory names, and a spare: same key schema, each with a stream.
    this.owners = ['a', 'b', 'c'].map(
      (suffix) =>
        new dynamodb.TableV2(this, `Owner${suffix.toUpperCase()}`, {
          tableName: `places-${suffix}`,
          partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
          sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
          billing: dynamodb.Billing.onDemand(),
          dynamoStream: dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
          pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
          deletionProtection: true,
          removalPolicy: RemovalPolicy.RETAIN,
        }),
    );

    const alarms = new AlarmTopic(this, 'Alarms', { topicName: 'places-alarms' });
    this.autopilot = new DirectoryAutopilot(this, 'Autopilot', {
      prefix: 'places-',
      code: props.code,
      directory: this.directory,
      owners: this.owners,
      spare: ['places-c'],
      act: props.act ?? false,
      alarmTopic: alarms.topic,
    });
  }
}

if (require.main === module) {
  const app = new App();
  const lambdaDir = app.node.tryGetContext('heatsink:lambdaDir') ?? path.resolve(__dirname, '..', '..', '..', 'target', 'lambda');
  new PlacesStack(app, 'Places', {
    code: codeFrom(lambdaDir, String(app.node.tryGetContext('heatsink:placeholderCode')) === 'true'),
    act: String(app.node.tryGetContext('places:act')) === 'true',
  });
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));
}

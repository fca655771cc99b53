import { Aws, RemovalPolicy, aws_iam as iam, aws_kms as kms, aws_sns as sns } from 'aws-cdk-lib';
import { Construct } from 'constructs';

export interface AlarmTopicProps {
  /** The topic's name (`<prefix>alarms` in the photo app). */
  readonly topicName: string;
}

/**
 * An SNS topic CloudWatch alarms can publish to, encrypted with a customer-managed key.
 *
 * The AWS-managed `alias/aws/sns` key cannot be given to CloudWatch, so an alarm action to a
 * topic encrypted with it fails; this key lets `cloudwatch.amazonaws.com` encrypt for the topic,
 * for alarms of this account only (`aws:SourceAccount`), and the topic policy lets CloudWatch
 * publish under the same condition. Subscribe a pager to `topic`; pass it to the blocks'
 * `alarmTopic`.
 */
export class AlarmTopic extends Construct {
  public readonly topic: sns.Topic;
  public readonly key: kms.Key;

  constructor(scope: Construct, id: string, props: AlarmTopicProps) {
    super(scope, id);
    this.key = new kms.Key(this, 'Key', {
      alias: `alias/${props.topicName}`,
      description: `${props.topicName} SNS topic: CloudWatch alarms may encrypt messages to it`,
      enableKeyRotation: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsPublishEncrypted',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
        // Alarms of this account only: no other account's CloudWatch can use the key.
        conditions: { StringEquals: { 'aws:SourceAccount': Aws.ACCOUNT_ID } },
      }),
    );
    this.topic = new sns.Topic(this, 'Topic', { topicName: props.topicName, masterKey: this.key, enforceSSL: true });
    this.topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarms',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [this.topic.topicArn],
        conditions: { StringEquals: { 'aws:SourceAccount': Aws.ACCOUNT_ID } },
      }),
    );
  }
}

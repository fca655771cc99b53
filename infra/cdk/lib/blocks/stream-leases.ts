import { RemovalPolicy, aws_dynamodb as dynamodb, aws_iam as iam, aws_kinesis as kinesis } from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { TABLES, TableSpec } from '../schema';
import { toolkitTable } from './hot-key-counter';

/** The lease table's calls a `heatsink::stream::Worker` makes (`LeaseTable`). */
export const LEASE_TABLE_ACTIONS = [
  'dynamodb:BatchGetItem',
  'dynamodb:DeleteItem',
  'dynamodb:GetItem',
  'dynamodb:PutItem',
  'dynamodb:Query',
  'dynamodb:UpdateItem',
] as const;

/** The Kinesis calls a worker makes on the stream it reads (polling and enhanced fan-out). */
export const KINESIS_CONSUMER_ACTIONS = [
  'kinesis:DescribeStreamConsumer',
  'kinesis:DescribeStreamSummary',
  'kinesis:GetRecords',
  'kinesis:GetShardIterator',
  'kinesis:ListShards',
  'kinesis:RegisterStreamConsumer',
  'kinesis:SubscribeToShard',
] as const;

export interface StreamLeasesProps {
  /** The lease table's name (`<prefix>leases` in the photo app). */
  readonly tableName: string;
  /** @default RETAIN */
  readonly removalPolicy?: RemovalPolicy;
}

/**
 * A lease table for `heatsink::stream::Worker` consumers (lineage-ordered, one lease per shard,
 * fenced takeovers), and the grants a consumer needs.
 *
 * A consumer runs outside the block (an ECS service, `heatsink tail`); give its role access
 * with `grantConsumer(role, stream)`: exactly the lease table's calls, and the stream's reads.
 */
export class StreamLeases extends Construct {
  public readonly table: dynamodb.TableV2;

  constructor(scope: Construct, id: string, props: StreamLeasesProps) {
    super(scope, id);
    const spec = TABLES.find((t) => t.logical === 'leases') as TableSpec;
    this.table = toolkitTable(this, 'Table', props.tableName, spec, props.removalPolicy);
  }

  /** Lets `grantee` hold leases in the table and read `stream` (when given). */
  public grantConsumer(grantee: iam.IGrantable, stream?: kinesis.IStream): void {
    iam.Grant.addToPrincipal({ grantee, actions: [...LEASE_TABLE_ACTIONS], resourceArns: [this.table.tableArn] });
    if (stream) {
      iam.Grant.addToPrincipal({ grantee, actions: [...KINESIS_CONSUMER_ACTIONS], resourceArns: [stream.streamArn] });
    }
  }
}

/**
 * The tables and streams heatsink deploys, written out once for the infrastructure.
 *
 * The source of truth is the Rust `heatsink::schema` module (`heatsink schema --json`); this file
 * mirrors it so that `cdk synth` needs no Rust toolchain, and `test/schema.test.ts` fails when
 * the two disagree. The Terraform module (`infra/terraform/tables.tf`) is checked the same way.
 */

import { ESM } from './esm';

export type AttributeType = 'S' | 'N' | 'B';

export interface KeyAttribute {
  readonly name: string;
  readonly type: AttributeType;
}

export interface GsiSpec {
  readonly name: string;
  readonly partitionKey: KeyAttribute;
  readonly sortKey?: KeyAttribute;
}

export interface TableSpec {
  /** Logical name: the table is called `prefix + logical`. */
  readonly logical: string;
  readonly partitionKey: KeyAttribute;
  readonly sortKey?: KeyAttribute;
  readonly gsis: readonly GsiSpec[];
  /** DynamoDB Streams view type, when the table has a change stream. */
  readonly stream?: 'NEW_IMAGE' | 'OLD_IMAGE' | 'NEW_AND_OLD_IMAGES' | 'KEYS_ONLY';
  readonly ttlAttribute?: string;
  /** Logical name of the Kinesis stream this table's changes are copied to (Kinesis Data Streams for DynamoDB). */
  readonly kinesisDestination?: string;
}

export interface StreamSpec {
  readonly logical: string;
  readonly shards: number;
}

export const DEFAULT_PREFIX = 'heatsink-';

export const TABLES: readonly TableSpec[] = [
  {
    logical: 'liked',
    partitionKey: { name: 'user', type: 'S' },
    sortKey: { name: 'post', type: 'S' },
    // The rebuilder recounts one post's minute through it; write-sharded `<post>#<n>`.
    gsis: [
      {
        name: 'by-post',
        partitionKey: { name: 'post_shard', type: 'S' },
        sortKey: { name: 'liked_at', type: 'N' },
      },
    ],
    stream: 'NEW_AND_OLD_IMAGES',
    kinesisDestination: 'like-events',
  },
  {
    logical: 'counters',
    partitionKey: { name: 'pk', type: 'S' },
    sortKey: { name: 'sk', type: 'S' },
    // Writer sub-keys by their newest time bucket, write-sharded: what changed since a rebuild.
    gsis: [
      {
        name: 'touched',
        partitionKey: { name: 'touched', type: 'S' },
        sortKey: { name: 'pk', type: 'S' },
      },
    ],
  },
  {
    logical: 'hotkeys',
    partitionKey: { name: 'key', type: 'S' },
    gsis: [],
    ttlAttribute: 'expires_at',
  },
  {
    logical: 'leases',
    partitionKey: { name: 'app', type: 'S' },
    sortKey: { name: 'shard_id', type: 'S' },
    gsis: [],
  },
  {
    logical: 'posts',
    partitionKey: { name: 'post', type: 'S' },
    gsis: [
      {
        name: 'by-creator',
        partitionKey: { name: 'creator_shard', type: 'S' },
        sortKey: { name: 'created_at', type: 'S' },
      },
    ],
  },
  {
    // The autopilot's state and kill switch: one item per stream it governs (like-events).
    logical: 'autopilot',
    partitionKey: { name: 'pk', type: 'S' },
    sortKey: { name: 'sk', type: 'S' },
    gsis: [],
  },
];

// like-events' shards come from infra/esm.json, the one definition of the aggregator's mapping.
export const STREAMS: readonly StreamSpec[] = [{ logical: 'like-events', shards: ESM.shards }];

/** The five Lambda functions; `functions/<name>/` holds each one's crate (binary `<name>`). */
export const FUNCTION_NAMES = ['likes-api', 'likes-aggregator', 'count-rebuilder', 'hotkey-controller', 'autopilot'] as const;
export type FunctionName = (typeof FUNCTION_NAMES)[number];

/** DynamoDB's per-partition ceilings (per second) and Kinesis' per-shard ceiling. */
export const PARTITION_WCU_CEILING = 1000;
export const PARTITION_RCU_CEILING = 3000;
export const SHARD_RECORDS_CEILING = 1000;

/**
 * likes-aggregator's event source mapping and the like-events stream, read from the one
 * definition the Terraform module (`infra/terraform/esm.tf`) and the Rust code
 * (`heatsink_photo_app::esm`, which `heatsink-demo` and `heatsink plan --esm` use) also read:
 * `infra/esm.json`. Nothing here repeats a value; a malformed file fails the synth.
 */
import * as fs from 'fs';
import * as path from 'path';

export interface EsmDefinition {
  /** The aggregator's one source of the liked table's changes. */
  readonly source: 'kinesis' | 'dynamodb-streams';
  /** Lambda `BatchSize`. */
  readonly batchSize: number;
  /** Lambda `MaximumBatchingWindowInSeconds`. */
  readonly windowSeconds: number;
  /** Shards of like-events (provisioned mode). */
  readonly shards: number;
  /** Capacity mode of like-events. */
  readonly streamMode: 'PROVISIONED' | 'ON_DEMAND';
}

/** Path of the shared definition. */
export const ESM_JSON = path.join(__dirname, '..', '..', 'esm.json');

function int(raw: Record<string, unknown>, key: string, min: number, max: number): number {
  const v = raw[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new Error(`${ESM_JSON}: ${key} must be an integer in ${min}..${max}, not ${JSON.stringify(v)}`);
  }
  return v;
}

/** Parses and checks the definition (Lambda: batch size 1-10,000, window at most 300 s). */
export function parseEsm(text: string): EsmDefinition {
  const raw = JSON.parse(text) as Record<string, unknown>;
  const source = raw.source;
  if (source !== 'kinesis' && source !== 'dynamodb-streams') {
    throw new Error(`${ESM_JSON}: source must be kinesis or dynamodb-streams, not ${JSON.stringify(source)}`);
  }
  const streamMode = raw.stream_mode;
  if (streamMode !== 'PROVISIONED' && streamMode !== 'ON_DEMAND') {
    throw new Error(`${ESM_JSON}: stream_mode must be PROVISIONED or ON_DEMAND, not ${JSON.stringify(streamMode)}`);
  }
  return {
    source,
    batchSize: int(raw, 'batch_size', 1, 10_000),
    windowSeconds: int(raw, 'window_seconds', 0, 300),
    shards: int(raw, 'shards', 1, 10_000),
    streamMode,
  };
}

/** The deployed definition. */
export const ESM: EsmDefinition = parseEsm(fs.readFileSync(ESM_JSON, 'utf8'));

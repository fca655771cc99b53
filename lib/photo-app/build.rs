//! Reads the one definition of the aggregator's event source mapping (`infra/esm.json`, also
//! read by the CDK app and the Terraform module) and turns it into the constants of
//! `heatsink_photo_app::esm`, so a malformed or out-of-range definition fails the build, not a
//! deployment.

use std::path::Path;

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/esm.json");
    println!("cargo::rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let def: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let int = |key: &str, min: u64, max: u64| -> u64 {
        match def[key].as_u64() {
            Some(n) if (min..=max).contains(&n) => n,
            _ => panic!(
                "{}: `{key}` must be an integer in {min}..={max}, not {}",
                path.display(),
                def[key]
            ),
        }
    };
    // Lambda's limits: BatchSize 1-10,000 for Kinesis and DynamoDB Streams, a window of at most
    // 300 s; Kinesis shards at least 1.
    let batch_size = int("batch_size", 1, 10_000);
    let window = int("window_seconds", 0, 300);
    let shards = int("shards", 1, 10_000);
    let source = match def["source"].as_str() {
        Some(s @ ("kinesis" | "dynamodb-streams")) => s.to_owned(),
        other => panic!(
            "{}: `source` must be kinesis or dynamodb-streams, not {other:?}",
            path.display()
        ),
    };
    let mode = match def["stream_mode"].as_str() {
        Some(s @ ("PROVISIONED" | "ON_DEMAND")) => s.to_owned(),
        other => panic!(
            "{}: `stream_mode` must be PROVISIONED or ON_DEMAND, not {other:?}",
            path.display()
        ),
    };
    let out = Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|e| panic!("OUT_DIR: {e}")))
        .join("esm_definition.rs");
    let code = format!(
        "/// Most records per batch (Lambda `BatchSize`).\n\
         pub const BATCH_SIZE: usize = {batch_size};\n\
         /// Longest wait for a batch to fill (Lambda `MaximumBatchingWindowInSeconds`).\n\
         pub const WINDOW: Duration = Duration::from_secs({window});\n\
         /// The deployed source: `kinesis` (Kinesis Data Streams for DynamoDB, `like-events`) or \
         `dynamodb-streams`; see docs/counters.md, \"The deployed default\", for why.\n\
         pub const SOURCE: &str = {source:?};\n\
         /// Shards of `like-events`.\n\
         pub const SHARDS: u32 = {shards};\n\
         /// Capacity mode of `like-events` (`PROVISIONED` or `ON_DEMAND`).\n\
         pub const STREAM_MODE: &str = {mode:?};\n"
    );
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
}

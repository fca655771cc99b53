//! The likes-aggregator's event source mapping: the settings the stack deploys, defined once.
//!
//! The CDK app (`infra/cdk/lib/heatsink-stack.ts`, `streamSource`), the Terraform module
//! (`infra/terraform/functions.tf`, both `aws_lambda_event_source_mapping`s) and `heatsink demo`
//! (its local event-source mapping) use these values; a contract test here reads both stacks'
//! sources and fails when either disagrees. The shard count is the schema's `like-events`
//! stream ([`Schema::like_events`]), which both stacks already take from `heatsink schema`.
//!
//! What they mean for the hot key: every batch that holds a like of post p9 costs one write to
//! p9's counter (its `w#<shard>` sub-key), so p9's partition takes at most
//! `shards × max(1 / window, shard rate / batch size)` writes/s: 4 shards, a 1 s window and 500
//! records per batch give 4 writes/s while each shard carries ≤ 500 records/s, i.e. about 1.7
//! writes per 1,000 likes at 2,400 likes/s.

use std::time::Duration;

use crate::schema::Schema;

/// Most records per batch (Lambda `BatchSize`).
pub const BATCH_SIZE: usize = 500;
/// Longest wait for a batch to fill (Lambda `MaximumBatchingWindowInSeconds`).
pub const WINDOW: Duration = Duration::from_secs(1);
/// The deployed source: Kinesis Data Streams for DynamoDB (`like-events`); see the README's
/// "Exactly-once counting" for why.
pub const SOURCE: &str = "kinesis";

/// The deployed mapping under `schema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsmDefinition {
    /// `kinesis` or `dynamodb-streams`.
    pub source: &'static str,
    /// Records per batch.
    pub batch_size: usize,
    /// Batching window.
    pub window: Duration,
    /// Shards of the source stream.
    pub shards: u32,
}

/// The mapping the stacks deploy.
pub fn deployed(schema: &Schema) -> EsmDefinition {
    EsmDefinition {
        source: SOURCE,
        batch_size: BATCH_SIZE,
        window: WINDOW,
        shards: u32::try_from(schema.like_events().shards).unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &str) -> String {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
        std::fs::read_to_string(format!("{root}{path}")).expect("stack source")
    }

    /// The number after `key` and its separator on every line containing `key`.
    fn numbers_after(text: &str, key: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split_once(key).map(|(_, rest)| rest))
            .map(|rest| {
                rest.chars()
                    .skip_while(|c| !c.is_ascii_digit())
                    .take_while(char::is_ascii_digit)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn both_stacks_deploy_the_one_definition() {
        let def = deployed(&Schema::new("heatsink-"));
        let tf = read("infra/terraform/functions.tf");
        let batch = numbers_after(&tf, "batch_size ");
        assert_eq!(batch.len(), 2, "two mappings in Terraform");
        assert!(
            batch.iter().all(|b| *b == def.batch_size.to_string()),
            "{batch:?}"
        );
        let window = numbers_after(&tf, "maximum_batching_window_in_seconds");
        assert!(
            window
                .iter()
                .all(|w| *w == def.window.as_secs().to_string()),
            "{window:?}"
        );
        let tables = read("infra/terraform/tables.tf");
        assert_eq!(
            numbers_after(&tables, "shard_count ")[0],
            def.shards.to_string()
        );
        let cdk = read("infra/cdk/lib/heatsink-stack.ts");
        assert_eq!(
            numbers_after(&cdk, "batchSize:"),
            vec![def.batch_size.to_string()]
        );
        assert_eq!(
            numbers_after(&cdk, "maxBatchingWindow: Duration.seconds("),
            vec![def.window.as_secs().to_string()]
        );
        assert!(
            cdk.contains("'kinesis'") || cdk.contains("\"kinesis\""),
            "the CDK app knows the kinesis source"
        );
        assert_eq!(def.source, "kinesis");
    }
}

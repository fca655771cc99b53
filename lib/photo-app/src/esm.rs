//! The likes-aggregator's event source mapping: the settings the stack deploys, defined once.
//!
//! The one definition is `infra/esm.json`. This crate's build script turns it into the
//! constants below (a malformed or out-of-range file fails the build); the CDK app reads it with
//! `JSON.parse` (`infra/cdk/lib/esm.ts`: the stream's shards and mode, both event sources'
//! batch size and window) and the Terraform module with `jsondecode(file(...))`
//! (`infra/terraform/esm.tf`). `heatsink-demo` (its local event-source mapping) and
//! `heatsink plan --esm` (its defaults) use these constants, and the schema's `like-events`
//! stream ([`Schema::like_events`]) takes its shard count from [`SHARDS`]. A contract test here
//! fails when either stack stops reading the file or hard-codes a value again.
//!
//! What they mean for the hot key: every batch that holds a like of post p9 costs one write to
//! p9's counter (its writer sub-key), so p9's partition takes at most
//! `shards × max(1 / window, shard rate / batch size)` writes/s. The deployed 13 shards, a 3 s
//! window and up to 3,000 records per batch close every batch on the window while a shard
//! carries under 1,000 records/s (10,000 likes/s over 13 shards is 770/s), so p9 takes
//! 13 / 3 = 4.3 writes/s: 1.8 per 1,000 likes at 2,400 likes/s, 0.43 at 10,000.
//!
//! ```
//! use heatsink_photo_app::{Schema, esm};
//! let def = esm::deployed(&Schema::new("heatsink-"));
//! assert_eq!((def.batch_size, def.window.as_secs(), def.shards), (3_000, 3, 13));
//! assert_eq!(def.source, "kinesis");
//! ```

use std::time::Duration;

use crate::schema::Schema;

include!(concat!(env!("OUT_DIR"), "/esm_definition.rs"));

/// The mapping the stacks deploy (the values of `infra/esm.json`).
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

/// The mapping the stacks deploy under `schema` (its `like-events` shard count).
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

    /// The trimmed right-hand sides of `key =` / `key:` on every line of `text` holding `key`.
    fn values_of(text: &str, key: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim_start().strip_prefix(key))
            .filter_map(|rest| {
                let rest = rest.trim_start();
                rest.strip_prefix('=')
                    .or_else(|| rest.strip_prefix(':'))
                    .map(|v| v.trim().trim_end_matches(',').to_owned())
            })
            .collect()
    }

    #[test]
    fn the_constants_are_the_shared_file() {
        let json: serde_json::Value =
            serde_json::from_str(&read("infra/esm.json")).expect("infra/esm.json");
        assert_eq!(json["batch_size"], BATCH_SIZE);
        assert_eq!(json["window_seconds"], WINDOW.as_secs());
        assert_eq!(json["shards"], SHARDS);
        assert_eq!(json["source"], SOURCE);
        assert_eq!(json["stream_mode"], STREAM_MODE);
        let def = deployed(&Schema::new("heatsink-"));
        assert_eq!(
            def,
            EsmDefinition {
                source: SOURCE,
                batch_size: BATCH_SIZE,
                window: WINDOW,
                shards: SHARDS,
            },
            "the schema's like-events takes its shards from the file"
        );
    }

    #[test]
    fn both_stacks_read_the_one_definition() {
        // Terraform: one local decoded from the file; every setting of both mappings and of the
        // stream refers to it, none is a literal.
        let esm_tf = read("infra/terraform/esm.tf");
        assert!(
            esm_tf.contains(r#"jsondecode(file("${path.module}/../esm.json"))"#),
            "{esm_tf}"
        );
        // The root module hands them to the counter block, whose one mapping takes them.
        let tf = read("infra/terraform/main.tf");
        assert_eq!(
            values_of(&tf, "batch_size"),
            vec!["local.esm.batch_size"],
            "the counter block's call"
        );
        assert_eq!(
            values_of(&tf, "window_seconds"),
            vec!["local.esm.window_seconds"]
        );
        let counter = read("infra/terraform/modules/hot-key-counter/main.tf");
        assert_eq!(values_of(&counter, "batch_size"), vec!["var.batch_size"]);
        assert_eq!(
            values_of(&counter, "maximum_batching_window_in_seconds"),
            vec!["var.window_seconds"]
        );
        let tables = read("infra/terraform/tables.tf");
        assert_eq!(
            values_of(&tables, "shard_count"),
            vec![r#"local.esm.stream_mode == "PROVISIONED" ? local.esm.shards : null"#]
        );
        assert_eq!(
            values_of(&tables, "stream_mode"),
            vec!["local.esm.stream_mode"]
        );
        // A Terraform variable's default cannot read a file: its default is checked instead.
        let vars = read("infra/terraform/variables.tf");
        let source_var = vars
            .split("variable ")
            .find(|b| b.starts_with("\"like_events_source\""))
            .expect("variable like_events_source");
        assert_eq!(
            values_of(source_var, "default"),
            vec![format!("{SOURCE:?}")]
        );
        // CDK: esm.ts parses the file; the stack and the schema mirror use only its fields.
        let esm_ts = read("infra/cdk/lib/esm.ts");
        assert!(
            esm_ts.contains("JSON.parse(text)")
                && esm_ts.contains("fs.readFileSync(ESM_JSON")
                && esm_ts.contains("'esm.json'"),
            "{esm_ts}"
        );
        let cdk = read("infra/cdk/lib/heatsink-stack.ts");
        // The stack hands them to the counter block (HotKeyCounter's `batching`).
        assert_eq!(values_of(&cdk, "batchSize"), vec!["ESM.batchSize"]);
        assert_eq!(values_of(&cdk, "windowSeconds"), vec!["ESM.windowSeconds"]);
        assert!(
            cdk.contains("props.likeEventsSource ?? ESM.source"),
            "the CDK default source is the file's"
        );
        let schema_ts = read("infra/cdk/lib/schema.ts");
        assert!(
            schema_ts.contains("shards: ESM.shards"),
            "the CDK schema mirror's like-events shards"
        );
    }

    #[test]
    fn the_aggregator_may_run_once_per_shard_in_both_stacks() {
        // One concurrent batch per shard (parallelization factor 1): a reserve below the shard
        // count would throttle the mapping and let the stream fall behind.
        let vars = read("infra/terraform/variables.tf");
        let reserve: Vec<u32> = values_of(&vars, r#""likes-aggregator""#)
            .iter()
            .filter_map(|v| v.parse().ok())
            .collect();
        assert_eq!(reserve.len(), 1, "{reserve:?}");
        assert!(reserve[0] >= SHARDS, "Terraform reserve {reserve:?}");
        let cdk = read("infra/cdk/lib/heatsink-stack.ts");
        let reserve: Vec<u32> = values_of(&cdk, "'likes-aggregator'")
            .iter()
            .filter_map(|v| v.parse().ok())
            .collect();
        assert_eq!(reserve.len(), 1, "{reserve:?}");
        assert!(reserve[0] >= SHARDS, "CDK reserve {reserve:?}");
    }
}

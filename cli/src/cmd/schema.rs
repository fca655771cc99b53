//! `heatsink schema`: the resource definitions, for people and for the infra tests.

use clap::Args;
use heatsink::schema::{DEFAULT_PREFIX, Schema};

use super::CmdResult;

/// Arguments of `heatsink schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Resource name prefix.
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Print JSON (the contract the CDK and Terraform tests check) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Prints the schema.
pub fn run(args: SchemaArgs) -> CmdResult {
    let schema = Schema::new(args.prefix);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&schema.to_json())?);
        return Ok(());
    }
    println!(
        "{:<24} {:<14} {:<12} extras",
        "table", "partition key", "sort key"
    );
    for t in schema.tables() {
        let mut extras = vec![];
        if let Some(view) = t.stream {
            extras.push(format!("stream {view:?}"));
        }
        if let Some(ttl) = t.ttl_attribute {
            extras.push(format!("ttl {ttl}"));
        }
        for g in &t.gsis {
            extras.push(format!(
                "gsi {} ({}{})",
                g.name,
                g.partition_key.name,
                g.sort_key
                    .as_ref()
                    .map(|k| format!(", {}", k.name))
                    .unwrap_or_default()
            ));
        }
        println!(
            "{:<24} {:<14} {:<12} {}",
            t.name,
            t.partition_key.name,
            t.sort_key.as_ref().map(|k| k.name).unwrap_or("-"),
            extras.join("; ")
        );
    }
    for st in schema.streams() {
        println!("{:<24} kinesis stream, {} shards", st.name, st.shards);
    }
    Ok(())
}

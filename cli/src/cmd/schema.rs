//! `heatsink schema`: the resource definitions, for people and for the infra tests.

use clap::Args;
use heatsink::schema::DEFAULT_PREFIX;
use heatsink_photo_app::schema::Schema;

use super::CmdResult;
use super::table::{Align, Grid};

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
    let mut grid = Grid::new(&[
        ("table", Align::Left),
        ("partition key", Align::Left),
        ("sort key", Align::Left),
        ("extras", Align::Left),
    ]);
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
        grid.row([
            t.name.to_string(),
            t.partition_key.name.to_owned(),
            t.sort_key
                .as_ref()
                .map_or("-", |k| k.name.as_str())
                .to_owned(),
            extras.join("; "),
        ]);
    }
    grid.print();
    let mut streams = Grid::headless(&[Align::Left, Align::Left]);
    for st in schema.streams() {
        streams.row([
            st.name.to_string(),
            format!("kinesis stream, {} shards", st.shards),
        ]);
    }
    streams.print();
    Ok(())
}

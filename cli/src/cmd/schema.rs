//! `heatsink schema`: the resource definitions, for people and for the infra tests.

use clap::Args;
use heatsink::schema::DEFAULT_PREFIX;
use heatsink_photo_app::schema::Schema;

use super::CmdResult;
use super::output::Output;
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
    Output { json: args.json }.report(|| schema.to_json(), || lines(&schema))
}

/// The human form: one row per table, then one per stream.
fn lines(schema: &Schema) -> Vec<String> {
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
    let mut lines = grid.lines();
    let mut streams = Grid::headless(&[Align::Left, Align::Left]);
    for st in schema.streams() {
        streams.row([
            st.name.to_string(),
            format!("kinesis stream, {} shards", st.shards),
        ]);
    }
    lines.extend(streams.lines());
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_names_every_table_and_stream_the_table_shows() {
        let schema = Schema::new("t-");
        let v: serde_json::Value =
            serde_json::from_str(&schema.to_json().to_string()).expect("parses");
        let human = lines(&schema);
        let tables = v["tables"].as_array().expect("tables");
        let streams = v["streams"].as_array().expect("streams");
        assert_eq!(human.len(), 1 + tables.len() + streams.len());
        for (row, table) in human[1..].iter().zip(tables) {
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(Some(cells[0]), table["name"].as_str(), "{row}");
            assert_eq!(
                Some(cells[1]),
                table["partition_key"]["name"].as_str(),
                "{row}"
            );
        }
        for (row, stream) in human[1 + tables.len()..].iter().zip(streams) {
            assert!(row.starts_with(stream["name"].as_str().unwrap()), "{row}");
            assert!(
                row.contains(&format!("{} shards", stream["shards"])),
                "{row}"
            );
        }
    }
}

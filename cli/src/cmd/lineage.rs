//! `heatsink lineage`: a stream's shard tree, with each shard's checkpoint for an application.

use std::collections::BTreeMap;

use clap::Args;
use heatsink::schema::{DEFAULT_PREFIX, Schema};
use heatsink::stream::{DynamoDbStreamsSource, KinesisSource, LeaseTable, ShardSource};
use heatsink::stream::{Lease, ShardGraph};

use super::fail::{Service, Target};
use super::table::{Align, Grid};
use super::{CmdResult, sdk_config};

/// Arguments of `heatsink lineage`.
#[derive(Debug, Args)]
pub struct LineageArgs {
    /// Kinesis stream name, or a DynamoDB stream ARN (`arn:aws:dynamodb:…/stream/…`).
    #[arg(long)]
    stream: String,
    /// Show each shard's lease (checkpoint, state, owner) for this application.
    #[arg(long)]
    app: Option<String>,
    /// Resource name prefix (the lease table is `<prefix>leases`).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
}

/// True for a DynamoDB Streams ARN rather than a Kinesis stream name.
pub fn is_dynamodb_stream(stream: &str) -> bool {
    stream.starts_with("arn:") && stream.contains(":dynamodb:")
}

/// Prints the shard tree.
pub async fn run(args: LineageArgs) -> CmdResult {
    let config = sdk_config().await;
    let service = if is_dynamodb_stream(&args.stream) {
        Service::DynamoDbStreams
    } else {
        Service::Kinesis
    };
    let listed = if service == Service::DynamoDbStreams {
        DynamoDbStreamsSource::new(aws_sdk_dynamodbstreams::Client::new(&config), &args.stream)
            .list_shards()
            .await
    } else {
        KinesisSource::new(aws_sdk_kinesis::Client::new(&config), &args.stream)
            .list_shards()
            .await
    };
    let shards = listed.map_err(|e| {
        Target::new(&config, service, "stream", &args.stream)
            .if_missing("check --stream (a Kinesis stream name or a DynamoDB stream ARN), or run 'heatsink local bootstrap'")
            .fail("list the shards of", &e)
    })?;
    let graph = ShardGraph::new(shards)?;
    let leases: BTreeMap<String, Lease> = match &args.app {
        Some(app) => {
            let ddb = aws_sdk_dynamodb::Client::new(&config);
            let schema = Schema::new(&args.prefix);
            let table = LeaseTable::from_schema(ddb, &schema, app);
            let scan = table.scan().await.map_err(|e| {
                let name = schema.table_name(heatsink::schema::Table::Leases);
                Target::new(&config, Service::DynamoDb, "lease table", name)
                    .if_missing("check --prefix, or run 'heatsink tail' once to create it")
                    .fail("scan the leases of", &e)
            })?;
            for bad in &scan.malformed {
                println!("malformed lease row {}: {}", bad.shard_id, bad.reason);
            }
            scan.leases
                .into_iter()
                .map(|l| (l.shard_id.clone(), l))
                .collect()
        }
        None => BTreeMap::new(),
    };
    let open = graph.shards().filter(|s| !s.is_closed()).count();
    println!(
        "{}: {} shards ({open} open, {} closed)",
        args.stream,
        graph.len(),
        graph.len() - open
    );
    for line in tree_lines(&graph, &leases, args.app.is_some()) {
        println!("{line}");
    }
    Ok(())
}

/// The parent a shard is drawn under: its first parent still listed.
fn drawn_under<'a>(graph: &'a ShardGraph, id: &str) -> Option<&'a str> {
    graph.parents_in_graph(id).into_iter().next()
}

/// A shard's cells after its tree-drawn id: state, parents, hash range and, with `--app`, its
/// checkpoint and lease.
fn describe(graph: &ShardGraph, id: &str, lease: Option<&Lease>, with_app: bool) -> Vec<String> {
    let Some(info) = graph.get(id) else {
        return Vec::new();
    };
    let parents: Vec<&str> = info.parents().collect();
    let mut cells = vec![
        if info.is_closed() { "closed" } else { "open" }.to_owned(),
        parents.join("+"),
        info.hash_range
            .map_or(String::new(), |(start, end)| format!("{start}..{end}")),
    ];
    if with_app {
        match lease {
            Some(l) => {
                cells.push(match &l.checkpoint {
                    heatsink::stream::Progress::InProgress(seq) => seq.to_string(),
                    other => other.to_checkpoint(),
                });
                let mut state = l.state.to_string();
                if let Some(owner) = &l.owner {
                    state.push_str(&format!(" by {owner} (token {})", l.counter));
                }
                cells.push(state);
            }
            None => cells.extend(["no lease".to_owned(), String::new()]),
        }
    }
    cells
}

/// The tree as table lines: a header, then roots first, each child under its first listed parent.
fn tree_lines(graph: &ShardGraph, leases: &BTreeMap<String, Lease>, with_app: bool) -> Vec<String> {
    let mut columns = vec![
        ("shard", Align::Left),
        ("state", Align::Left),
        ("parents", Align::Left),
        ("hash range", Align::Left),
    ];
    if with_app {
        columns.extend([("checkpoint", Align::Left), ("lease", Align::Left)]);
    }
    let mut grid = Grid::new(&columns);
    let roots: Vec<&str> = graph
        .lineage_order()
        .filter(|id| drawn_under(graph, id).is_none())
        .collect();
    let mut stack: Vec<(&str, String, bool)> = roots
        .iter()
        .rev()
        .enumerate()
        .map(|(i, id)| (*id, String::new(), i == 0))
        .collect();
    // Depth-first; `prefix` is the indentation, `last` whether it is its parent's last child.
    while let Some((id, prefix, last)) = stack.pop() {
        let is_root = drawn_under(graph, id).is_none();
        let branch = if is_root {
            ""
        } else if last {
            "└─ "
        } else {
            "├─ "
        };
        let mut row = vec![format!("{prefix}{branch}{id}")];
        row.extend(describe(graph, id, leases.get(id), with_app));
        grid.row(row);
        let child_prefix = if is_root {
            String::new()
        } else {
            format!("{prefix}{}", if last { "   " } else { "│  " })
        };
        let children: Vec<&str> = graph
            .children_of(id)
            .into_iter()
            .filter(|c| drawn_under(graph, c) == Some(id))
            .collect();
        for (i, child) in children.iter().enumerate().rev() {
            stack.push((child, child_prefix.clone(), i + 1 == children.len()));
        }
    }
    grid.lines()
}

#[cfg(test)]
mod tests {
    use heatsink::stream::ShardInfo;

    use super::*;

    #[test]
    fn a_split_then_merge_draws_each_shard_once_under_its_first_parent() {
        let closed = |id: &str, parent: Option<&str>| ShardInfo {
            parent: parent.map(str::to_owned),
            ending_seq: Some("9".into()),
            ..ShardInfo::new(id)
        };
        let merged = ShardInfo {
            parent: Some("s1".into()),
            adjacent_parent: Some("s2".into()),
            ..ShardInfo::new("s3")
        };
        let graph = ShardGraph::new(vec![
            closed("s0", None),
            closed("s1", Some("s0")),
            closed("s2", Some("s0")),
            merged,
        ])
        .unwrap();
        let lines = tree_lines(&graph, &BTreeMap::new(), false);
        assert_eq!(
            lines,
            [
                "shard    state  parents hash range",
                "s0       closed",
                "├─ s1    closed s0",
                "│  └─ s3 open   s1+s2",
                "└─ s2    closed s0",
            ]
        );
    }
}

//! `heatsink lineage`: a stream's shard tree, with each shard's checkpoint for an application.

use std::collections::BTreeMap;

use clap::Args;
use heatsink::core::stream::{Lease, ShardGraph};
use heatsink::schema::{DEFAULT_PREFIX, Schema};
use heatsink::stream::{DynamoDbStreamsSource, KinesisSource, LeaseTable, ShardSource};

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
    let shards = if is_dynamodb_stream(&args.stream) {
        DynamoDbStreamsSource::new(aws_sdk_dynamodbstreams::Client::new(&config), &args.stream)
            .list_shards()
            .await?
    } else {
        KinesisSource::new(aws_sdk_kinesis::Client::new(&config), &args.stream)
            .list_shards()
            .await?
    };
    let graph = ShardGraph::new(shards)?;
    let leases: BTreeMap<String, Lease> = match &args.app {
        Some(app) => {
            let ddb = aws_sdk_dynamodb::Client::new(&config);
            let table = LeaseTable::from_schema(ddb, &Schema::new(&args.prefix), app);
            let scan = table.scan().await?;
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

fn describe(graph: &ShardGraph, id: &str, lease: Option<&Lease>, with_app: bool) -> String {
    let Some(info) = graph.get(id) else {
        return id.to_owned();
    };
    let mut out = format!("{id}  {}", if info.is_closed() { "closed" } else { "open" });
    let parents: Vec<&str> = info.parents().collect();
    if !parents.is_empty() {
        out.push_str(&format!("  parents {}", parents.join("+")));
    }
    if let Some((start, end)) = info.hash_range {
        out.push_str(&format!("  hash {start}..{end}"));
    }
    if with_app {
        match lease {
            Some(l) => {
                out.push_str(&format!(
                    "  checkpoint {}  {}",
                    match &l.checkpoint {
                        heatsink::core::stream::Progress::InProgress(seq) => seq.to_string(),
                        other => other.to_checkpoint(),
                    },
                    l.state
                ));
                if let Some(owner) = &l.owner {
                    out.push_str(&format!(" by {owner} (token {})", l.counter));
                }
            }
            None => out.push_str("  no lease"),
        }
    }
    out
}

/// The tree as lines: roots first, each child under its first listed parent.
fn tree_lines(graph: &ShardGraph, leases: &BTreeMap<String, Lease>, with_app: bool) -> Vec<String> {
    let mut lines = Vec::new();
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
        lines.push(format!(
            "{prefix}{branch}{}",
            describe(graph, id, leases.get(id), with_app)
        ));
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
    lines
}

#[cfg(test)]
mod tests {
    use heatsink::core::stream::ShardInfo;

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
                "s0  closed",
                "├─ s1  closed  parents s0",
                "│  └─ s3  open  parents s1+s2",
                "└─ s2  closed  parents s0",
            ]
        );
    }
}

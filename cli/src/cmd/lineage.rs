//! `heatsink lineage`: a stream's shard tree, with each shard's checkpoint for an application.

use std::collections::BTreeMap;

use clap::Args;
use heatsink::schema::{DEFAULT_PREFIX, Schema};
use heatsink::stream::{DynamoDbStreamsSource, KinesisSource, LeaseTable, ShardSource};
use heatsink::stream::{Lease, ShardGraph};

use serde_json::{Value, json};

use super::fail::{Failure, Service, Target};
use super::output::{Output, big};
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
    #[command(flatten)]
    output: Output,
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
    let graph = ShardGraph::new(shards).map_err(|e| {
        Failure::new(format!(
            "the shard listing of {} is not a lineage ({e}): list it again in a minute (a reshard may be under way)",
            args.stream
        ))
    })?;
    let (leases, malformed) = match &args.app {
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
            let malformed = scan
                .malformed
                .iter()
                .map(|bad| (bad.shard_id.clone(), bad.reason.clone()))
                .collect();
            let leases = scan
                .leases
                .into_iter()
                .map(|l| (l.shard_id.clone(), l))
                .collect();
            (Some(leases), malformed)
        }
        None => (None, Vec::new()),
    };
    let view = Lineage {
        stream: &args.stream,
        graph: &graph,
        leases: leases.as_ref(),
        malformed: &malformed,
    };
    args.output.report(|| view.json(), || view.lines())
}

/// What `lineage` prints: the graph and, with `--app`, the leases (no I/O).
struct Lineage<'a> {
    stream: &'a str,
    graph: &'a ShardGraph,
    /// The application's leases by shard (`None` without `--app`).
    leases: Option<&'a BTreeMap<String, Lease>>,
    /// Lease rows that did not parse: shard id, reason.
    malformed: &'a [(String, String)],
}

impl Lineage<'_> {
    /// The human form: malformed rows, the counts, then the tree.
    fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .malformed
            .iter()
            .map(|(shard, reason)| format!("malformed lease row {shard}: {reason}"))
            .collect();
        let open = self.graph.shards().filter(|s| !s.is_closed()).count();
        lines.push(format!(
            "{}: {} shards ({open} open, {} closed)",
            self.stream,
            self.graph.len(),
            self.graph.len() - open
        ));
        let empty = BTreeMap::new();
        lines.extend(tree_lines(
            self.graph,
            self.leases.unwrap_or(&empty),
            self.leases.is_some(),
        ));
        lines
    }

    /// `lineage --json`: every shard in lineage order with its state, parents, hash range
    /// (decimal strings) and, with `--app`, its lease (`null` when it has none).
    fn json(&self) -> Value {
        let shards: Vec<Value> = self
            .graph
            .lineage_order()
            .filter_map(|id| self.graph.get(id))
            .map(|info| {
                let mut v = json!({
                    "shard_id": info.shard_id,
                    "state": if info.is_closed() { "closed" } else { "open" },
                    "parents": info.parents().collect::<Vec<_>>(),
                    "hash_range": info.hash_range.map(|(start, end)| json!({"start": big(start), "end": big(end)})),
                });
                if let Some(leases) = self.leases {
                    v["lease"] = leases.get(&info.shard_id).map_or(Value::Null, |l| {
                        json!({
                            "checkpoint": checkpoint_text(l),
                            "state": l.state.to_string(),
                            "owner": l.owner,
                            "counter": l.counter,
                        })
                    });
                }
                v
            })
            .collect();
        let malformed: Vec<Value> = self
            .malformed
            .iter()
            .map(|(shard, reason)| json!({"shard_id": shard, "reason": reason}))
            .collect();
        json!({"stream": self.stream, "shards": shards, "malformed": malformed})
    }
}

/// A lease's checkpoint as both forms print it: the sequence number while in progress.
fn checkpoint_text(l: &Lease) -> String {
    match &l.checkpoint {
        heatsink::stream::Progress::InProgress(seq) => seq.to_string(),
        other => other.to_checkpoint(),
    }
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
                cells.push(checkpoint_text(l));
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

    fn split_then_merge() -> ShardGraph {
        let closed = |id: &str, parent: Option<&str>| ShardInfo {
            parent: parent.map(str::to_owned),
            ending_seq: Some("9".into()),
            hash_range: Some((0, u128::MAX)),
            ..ShardInfo::new(id)
        };
        let merged = ShardInfo {
            parent: Some("s1".into()),
            adjacent_parent: Some("s2".into()),
            ..ShardInfo::new("s3")
        };
        ShardGraph::new(vec![
            closed("s0", None),
            closed("s1", Some("s0")),
            closed("s2", Some("s0")),
            merged,
        ])
        .unwrap()
    }

    #[test]
    fn the_json_carries_each_shard_its_parents_range_and_lease() {
        let graph = split_then_merge();
        let mut finished = Lease::discovered(graph.get("s1").unwrap());
        finished.checkpoint = heatsink::stream::Progress::Finished;
        finished.state = heatsink::stream::LeaseState::ShardEnd;
        finished.counter = 7;
        let mut held = Lease::discovered(graph.get("s3").unwrap());
        held.owner = Some("tail-1".into());
        held.counter = 3;
        let leases = BTreeMap::from([("s1".to_owned(), finished), ("s3".to_owned(), held)]);
        let malformed = [("s9".to_owned(), "no counter".to_owned())];
        let view = Lineage {
            stream: "like-events",
            graph: &graph,
            leases: Some(&leases),
            malformed: &malformed,
        };
        let v: Value = serde_json::from_str(&view.json().to_string()).expect("parses");
        let human = view.lines();
        assert_eq!(human[0], "malformed lease row s9: no counter");
        assert_eq!(human[1], "like-events: 4 shards (1 open, 3 closed)");
        assert_eq!(v["stream"], "like-events");
        assert_eq!(
            v["malformed"],
            json!([{"shard_id": "s9", "reason": "no counter"}])
        );
        let shards = v["shards"].as_array().unwrap();
        let ids: Vec<&str> = shards
            .iter()
            .map(|s| s["shard_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 4);
        let by_id = |id: &str| shards.iter().find(|s| s["shard_id"] == id).unwrap();
        assert_eq!(by_id("s3")["state"], "open");
        assert_eq!(by_id("s3")["parents"], json!(["s1", "s2"]));
        assert_eq!(by_id("s3")["hash_range"], Value::Null);
        assert_eq!(
            by_id("s0")["hash_range"],
            json!({"start": "0", "end": u128::MAX.to_string()})
        );
        assert_eq!(by_id("s0")["lease"], Value::Null);
        let s1 = &by_id("s1")["lease"];
        assert_eq!(s1["counter"], 7);
        let s1_line = human.iter().find(|l| l.contains("s1 ")).unwrap();
        assert!(
            s1_line.contains(s1["checkpoint"].as_str().unwrap()),
            "{s1_line}"
        );
        assert!(s1_line.contains(s1["state"].as_str().unwrap()), "{s1_line}");
        let s3 = &by_id("s3")["lease"];
        assert_eq!(s3["owner"], "tail-1");
        let s3_line = human.iter().find(|l| l.contains("s3 ")).unwrap();
        assert!(s3_line.contains("by tail-1 (token 3)"), "{s3_line}");
        let bare = Lineage {
            leases: None,
            ..view
        };
        let v = bare.json();
        assert!(
            v["shards"][0].get("lease").is_none(),
            "no --app, no lease field"
        );
    }

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

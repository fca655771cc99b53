//! The one definition of every DynamoDB table and Kinesis stream heatsink uses.
//!
//! Tables are described once here, as plain data ([`TableSpec`], [`StreamSpec`]); the CLI's
//! `heatsink local bootstrap` creates them from it ([`ensure`]), the integration tests create
//! uniquely-prefixed copies from it, and the infrastructure tests compare the synthesized CDK
//! template and the Terraform module with its JSON export ([`Schema::to_json`], printed by
//! `heatsink schema --json`). A table name is `prefix + logical name`, so one account can hold
//! several isolated copies (`heatsink-liked`, `t1a2b-liked`, …).
//!
//! | logical name | keys | extras | why |
//! |---|---|---|---|
//! | `liked` | `user` / `post` | stream NEW_AND_OLD_IMAGES | durable per-user like record; its change stream feeds the counters (Part 5) |
//! | `counters` | `pk` / `sk` | | writer, salted and `fix` sub-keys of each counter |
//! | `hotkeys` | `key` | TTL `expires_at` | hot-key directory: key → mitigation, S, epoch |
//! | `leases` | `app` / `shard_id` | | stream consumer leases and checkpoints |
//! | `posts` | `post` | GSI `by-creator` on `creator_shard` / `created_at` | a GSI sharded `creator#n` |
//!
//! The Kinesis stream `like-events` is where the `liked` table's changes land in production
//! (Kinesis Data Streams for DynamoDB); locally the aggregator also reads DynamoDB Streams.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableDescription,
    TableStatus, TimeToLiveSpecification,
};
use aws_sdk_kinesis::types::{StreamMode, StreamModeDetails, StreamStatus};
use serde::Serialize;

use crate::error::SchemaError;

/// The table-name prefix used when none is given: `heatsink-liked`, `heatsink-counters`, ….
pub const DEFAULT_PREFIX: &str = "heatsink-";

/// How long [`ensure`] and the wait helpers wait for a table or stream to become ACTIVE.
pub const ACTIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// A DynamoDB key attribute type (only the scalar types a key may have).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AttrType {
    /// String (`S`).
    S,
    /// Number (`N`).
    N,
    /// Binary (`B`).
    B,
}

impl AttrType {
    fn to_sdk(self) -> ScalarAttributeType {
        match self {
            Self::S => ScalarAttributeType::S,
            Self::N => ScalarAttributeType::N,
            Self::B => ScalarAttributeType::B,
        }
    }
}

/// One key attribute: its name and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyAttr {
    /// Attribute name as stored in items.
    pub name: &'static str,
    /// Attribute type.
    #[serde(rename = "type")]
    pub kind: AttrType,
}

const fn s(name: &'static str) -> KeyAttr {
    KeyAttr {
        name,
        kind: AttrType::S,
    }
}

/// A global secondary index (projection is always ALL: heatsink's GSIs serve whole items).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GsiSpec {
    /// Index name.
    pub name: &'static str,
    /// Index partition key.
    pub partition_key: KeyAttr,
    /// Index sort key.
    pub sort_key: Option<KeyAttr>,
}

/// What a table's change stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StreamView {
    /// Keys only.
    KeysOnly,
    /// The item after the change.
    NewImage,
    /// The item before the change.
    OldImage,
    /// Both images: the aggregator needs the old one to see an un-like.
    NewAndOldImages,
}

impl StreamView {
    fn to_sdk(self) -> StreamViewType {
        match self {
            Self::KeysOnly => StreamViewType::KeysOnly,
            Self::NewImage => StreamViewType::NewImage,
            Self::OldImage => StreamViewType::OldImage,
            Self::NewAndOldImages => StreamViewType::NewAndOldImages,
        }
    }
}

/// The logical tables heatsink uses; a [`Schema`] turns each into a concrete [`TableSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// Durable per-user like records (`user`, `post`), streamed.
    Liked,
    /// Counter sub-keys (`pk`, `sk`).
    Counters,
    /// Hot-key directory (`key`), TTL'd.
    Hotkeys,
    /// Stream consumer leases (`app`, `shard_id`).
    Leases,
    /// Posts with a write-sharded GSI on the creator.
    Posts,
}

impl Table {
    /// Every logical table, in creation order.
    pub const ALL: [Table; 5] = [
        Table::Liked,
        Table::Counters,
        Table::Hotkeys,
        Table::Leases,
        Table::Posts,
    ];

    /// The logical name, the part of the table name after the prefix.
    pub fn logical_name(self) -> &'static str {
        match self {
            Table::Liked => "liked",
            Table::Counters => "counters",
            Table::Hotkeys => "hotkeys",
            Table::Leases => "leases",
            Table::Posts => "posts",
        }
    }
}

/// A table's full definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableSpec {
    /// Which logical table this is.
    pub table: Table,
    /// Concrete table name (prefix + logical name).
    pub name: String,
    /// Partition key.
    pub partition_key: KeyAttr,
    /// Sort key, if any.
    pub sort_key: Option<KeyAttr>,
    /// Global secondary indexes.
    pub gsis: Vec<GsiSpec>,
    /// Change stream view, if the table streams.
    pub stream: Option<StreamView>,
    /// TTL attribute (epoch seconds), if items expire.
    pub ttl_attribute: Option<&'static str>,
}

/// A Kinesis data stream's definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamSpec {
    /// Logical name.
    pub logical: &'static str,
    /// Concrete stream name (prefix + logical name).
    pub name: String,
    /// Provisioned shard count.
    pub shards: i32,
}

/// The set of resources of one heatsink installation, named with one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    prefix: String,
}

impl Default for Schema {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

impl Schema {
    /// A schema whose resource names all start with `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The prefix every resource name starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The concrete name of a logical table.
    pub fn table_name(&self, table: Table) -> String {
        format!("{}{}", self.prefix, table.logical_name())
    }

    /// The full definition of one table.
    pub fn table(&self, table: Table) -> TableSpec {
        let name = self.table_name(table);
        let base = TableSpec {
            table,
            name,
            partition_key: s("pk"),
            sort_key: None,
            gsis: vec![],
            stream: None,
            ttl_attribute: None,
        };
        match table {
            Table::Liked => TableSpec {
                partition_key: s("user"),
                sort_key: Some(s("post")),
                stream: Some(StreamView::NewAndOldImages),
                ..base
            },
            Table::Counters => TableSpec {
                partition_key: s("pk"),
                sort_key: Some(s("sk")),
                ..base
            },
            Table::Hotkeys => TableSpec {
                partition_key: s("key"),
                ttl_attribute: Some("expires_at"),
                ..base
            },
            Table::Leases => TableSpec {
                partition_key: s("app"),
                sort_key: Some(s("shard_id")),
                ..base
            },
            Table::Posts => TableSpec {
                partition_key: s("post"),
                gsis: vec![GsiSpec {
                    name: "by-creator",
                    partition_key: s("creator_shard"),
                    sort_key: Some(s("created_at")),
                }],
                ..base
            },
        }
    }

    /// Every table definition, in creation order.
    pub fn tables(&self) -> Vec<TableSpec> {
        Table::ALL.iter().map(|t| self.table(*t)).collect()
    }

    /// The Kinesis stream the `liked` table's changes flow into in production.
    pub fn like_events(&self) -> StreamSpec {
        StreamSpec {
            logical: "like-events",
            name: format!("{}like-events", self.prefix),
            shards: 4,
        }
    }

    /// Every stream definition.
    pub fn streams(&self) -> Vec<StreamSpec> {
        vec![self.like_events()]
    }

    /// The schema as JSON, the contract the CDK and Terraform tests check their resources against.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "prefix": self.prefix,
            "tables": self.tables(),
            "streams": self.streams(),
        })
    }
}

impl TableSpec {
    fn attribute_definitions(&self) -> Vec<AttributeDefinition> {
        let mut attrs: Vec<&KeyAttr> = vec![&self.partition_key];
        attrs.extend(self.sort_key.iter());
        for g in &self.gsis {
            attrs.push(&g.partition_key);
            attrs.extend(g.sort_key.iter());
        }
        let mut seen = std::collections::BTreeSet::new();
        attrs
            .into_iter()
            .filter(|a| seen.insert(a.name))
            .filter_map(|a| {
                AttributeDefinition::builder()
                    .attribute_name(a.name)
                    .attribute_type(a.kind.to_sdk())
                    .build()
                    .ok()
            })
            .collect()
    }

    fn key_schema(pk: &KeyAttr, sk: Option<&KeyAttr>) -> Vec<KeySchemaElement> {
        let mut out = vec![];
        for (attr, kind) in [(Some(pk), KeyType::Hash), (sk, KeyType::Range)] {
            if let Some(a) = attr
                && let Ok(e) = KeySchemaElement::builder()
                    .attribute_name(a.name)
                    .key_type(kind)
                    .build()
            {
                out.push(e);
            }
        }
        out
    }

    /// Checks an existing table against this definition; `Err` names the first difference.
    pub fn check(&self, found: &TableDescription) -> Result<(), String> {
        let keys = |ks: &[KeySchemaElement]| -> Vec<(String, String)> {
            ks.iter()
                .map(|k| (k.attribute_name.clone(), k.key_type.as_str().to_owned()))
                .collect()
        };
        let want = keys(&Self::key_schema(
            &self.partition_key,
            self.sort_key.as_ref(),
        ));
        let got = keys(found.key_schema());
        if want != got {
            return Err(format!("key schema is {got:?}, expected {want:?}"));
        }
        for def in self.attribute_definitions() {
            let found_type = found
                .attribute_definitions()
                .iter()
                .find(|d| d.attribute_name == def.attribute_name)
                .map(|d| d.attribute_type.clone());
            if found_type.as_ref() != Some(&def.attribute_type) {
                return Err(format!(
                    "attribute `{}` has type {:?}, expected {}",
                    def.attribute_name,
                    found_type.map(|t| t.as_str().to_owned()),
                    def.attribute_type.as_str()
                ));
            }
        }
        for gsi in &self.gsis {
            let Some(g) = found
                .global_secondary_indexes()
                .iter()
                .find(|g| g.index_name() == Some(gsi.name))
            else {
                return Err(format!("GSI `{}` is missing", gsi.name));
            };
            let want = keys(&Self::key_schema(&gsi.partition_key, gsi.sort_key.as_ref()));
            let got = keys(g.key_schema());
            if want != got {
                return Err(format!(
                    "GSI `{}` key schema is {got:?}, expected {want:?}",
                    gsi.name
                ));
            }
        }
        let stream = found
            .stream_specification()
            .filter(|s| s.stream_enabled())
            .and_then(|s| s.stream_view_type().cloned());
        let want_stream = self.stream.map(StreamView::to_sdk);
        if stream != want_stream {
            return Err(format!(
                "stream is {:?}, expected {:?}",
                stream.map(|s| s.as_str().to_owned()),
                want_stream.map(|s| s.as_str().to_owned())
            ));
        }
        Ok(())
    }
}

/// What [`ensure`] did with one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It did not exist and was created.
    Created,
    /// It existed and matches the definition; it was left alone.
    Exists,
}

/// One line of a bootstrap report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ensured {
    /// `table` or `stream`.
    pub kind: &'static str,
    /// Concrete resource name.
    pub name: String,
    /// What happened.
    pub outcome: Outcome,
}

/// Creates one table if missing and waits for it to be ACTIVE; checks it if present.
pub async fn ensure_table(
    ddb: &aws_sdk_dynamodb::Client,
    spec: &TableSpec,
) -> Result<Outcome, SchemaError> {
    match ddb.describe_table().table_name(&spec.name).send().await {
        Ok(out) => {
            let desc = out
                .table
                .unwrap_or_else(|| TableDescription::builder().build());
            spec.check(&desc).map_err(|detail| SchemaError::Mismatch {
                resource: spec.name.clone(),
                detail,
            })?;
            wait_table_active(ddb, &spec.name).await?;
            return Ok(Outcome::Exists);
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_not_found_exception()) => {}
        Err(e) => return Err(SchemaError::dynamo(&spec.name, e)),
    }
    let mut create = ddb
        .create_table()
        .table_name(&spec.name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(spec.attribute_definitions()))
        .set_key_schema(Some(TableSpec::key_schema(
            &spec.partition_key,
            spec.sort_key.as_ref(),
        )));
    for gsi in &spec.gsis {
        let index = GlobalSecondaryIndex::builder()
            .index_name(gsi.name)
            .set_key_schema(Some(TableSpec::key_schema(
                &gsi.partition_key,
                gsi.sort_key.as_ref(),
            )))
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::All)
                    .build(),
            )
            .build()
            .map_err(|e| SchemaError::Invalid(e.to_string()))?;
        create = create.global_secondary_indexes(index);
    }
    if let Some(view) = spec.stream {
        create = create.stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(view.to_sdk())
                .build()
                .map_err(|e| SchemaError::Invalid(e.to_string()))?,
        );
    }
    match create.send().await {
        Ok(_) => {}
        // Another bootstrap (or a parallel test) won the race: treat like "exists" after a check.
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_in_use_exception()) =>
        {
            return Box::pin(ensure_table(ddb, spec)).await;
        }
        Err(e) => return Err(SchemaError::dynamo(&spec.name, e)),
    }
    wait_table_active(ddb, &spec.name).await?;
    if let Some(attr) = spec.ttl_attribute {
        ddb.update_time_to_live()
            .table_name(&spec.name)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name(attr)
                    .build()
                    .map_err(|e| SchemaError::Invalid(e.to_string()))?,
            )
            .send()
            .await
            .map_err(|e| SchemaError::dynamo(&spec.name, e))?;
    }
    Ok(Outcome::Created)
}

/// Creates a Kinesis stream if missing and waits for ACTIVE; checks its shard count if present.
pub async fn ensure_stream(
    kinesis: &aws_sdk_kinesis::Client,
    spec: &StreamSpec,
) -> Result<Outcome, SchemaError> {
    match kinesis
        .describe_stream_summary()
        .stream_name(&spec.name)
        .send()
        .await
    {
        Ok(out) => {
            if let Some(sum) = out.stream_description_summary() {
                let open = sum.open_shard_count();
                // A resharded stream is still ours: only an empty one is clearly someone else's.
                if open < 1 {
                    return Err(SchemaError::Mismatch {
                        resource: spec.name.clone(),
                        detail: format!("stream has {open} open shards"),
                    });
                }
            }
            wait_stream_active(kinesis, &spec.name).await?;
            return Ok(Outcome::Exists);
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_not_found_exception()) => {}
        Err(e) => return Err(SchemaError::kinesis(&spec.name, e)),
    }
    let created = kinesis
        .create_stream()
        .stream_name(&spec.name)
        .shard_count(spec.shards)
        .stream_mode_details(
            StreamModeDetails::builder()
                .stream_mode(StreamMode::Provisioned)
                .build()
                .map_err(|e| SchemaError::Invalid(e.to_string()))?,
        )
        .send()
        .await;
    match created {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_in_use_exception()) => {}
        Err(e) => return Err(SchemaError::kinesis(&spec.name, e)),
    }
    wait_stream_active(kinesis, &spec.name).await?;
    Ok(Outcome::Created)
}

/// Creates every table and stream of `schema` that is missing; existing ones are left alone.
///
/// A resource that exists with a different shape fails with [`SchemaError::Mismatch`] naming it.
pub async fn ensure(
    ddb: &aws_sdk_dynamodb::Client,
    kinesis: &aws_sdk_kinesis::Client,
    schema: &Schema,
) -> Result<Vec<Ensured>, SchemaError> {
    let mut report = vec![];
    for spec in schema.tables() {
        let outcome = ensure_table(ddb, &spec).await?;
        report.push(Ensured {
            kind: "table",
            name: spec.name,
            outcome,
        });
    }
    for spec in schema.streams() {
        let outcome = ensure_stream(kinesis, &spec).await?;
        report.push(Ensured {
            kind: "stream",
            name: spec.name,
            outcome,
        });
    }
    Ok(report)
}

/// Calls `probe` every 50 ms until it reports ready, failing after [`ACTIVE_TIMEOUT`].
async fn poll_active<F, Fut>(resource: &str, mut probe: F) -> Result<(), SchemaError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, SchemaError>>,
{
    let start = Instant::now();
    loop {
        if probe().await? {
            return Ok(());
        }
        if start.elapsed() > ACTIVE_TIMEOUT {
            return Err(SchemaError::Timeout {
                resource: resource.to_owned(),
                waited: start.elapsed(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls DescribeTable until the table (and each of its GSIs) is ACTIVE, up to [`ACTIVE_TIMEOUT`].
pub async fn wait_table_active(
    ddb: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<(), SchemaError> {
    poll_active(name, || async {
        let out = ddb
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| SchemaError::dynamo(name, e))?;
        Ok(out.table().is_some_and(|t| {
            t.table_status() == Some(&TableStatus::Active)
                && t.global_secondary_indexes().iter().all(|g| {
                    g.index_status()
                        .is_none_or(|s| *s == aws_sdk_dynamodb::types::IndexStatus::Active)
                })
        }))
    })
    .await
}

/// Polls DescribeStreamSummary until the stream is ACTIVE, up to [`ACTIVE_TIMEOUT`].
pub async fn wait_stream_active(
    kinesis: &aws_sdk_kinesis::Client,
    name: &str,
) -> Result<(), SchemaError> {
    poll_active(name, || async {
        let out = kinesis
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
            .map_err(|e| SchemaError::kinesis(name, e))?;
        Ok(out
            .stream_description_summary()
            .is_some_and(|s| s.stream_status() == &StreamStatus::Active))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_prefix_plus_logical_name() {
        let schema = Schema::new("t1-");
        let names: Vec<String> = schema.tables().into_iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "t1-liked",
                "t1-counters",
                "t1-hotkeys",
                "t1-leases",
                "t1-posts"
            ]
        );
        assert_eq!(schema.like_events().name, "t1-like-events");
    }

    #[test]
    fn attribute_definitions_cover_every_key_once() {
        let posts = Schema::default().table(Table::Posts);
        let names: Vec<String> = posts
            .attribute_definitions()
            .into_iter()
            .map(|d| d.attribute_name)
            .collect();
        assert_eq!(names, ["post", "creator_shard", "created_at"]);
    }

    #[test]
    fn a_table_with_another_key_schema_is_reported_as_a_mismatch() {
        let spec = Schema::default().table(Table::Counters);
        let found = TableDescription::builder()
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("id")
                    .key_type(KeyType::Hash)
                    .build()
                    .expect("valid key element"),
            )
            .build();
        let err = spec.check(&found).expect_err("must not match");
        assert!(err.contains("key schema"), "{err}");
    }

    #[test]
    fn a_table_missing_its_stream_is_reported_as_a_mismatch() {
        let spec = Schema::default().table(Table::Liked);
        let found = TableDescription::builder()
            .set_key_schema(Some(TableSpec::key_schema(
                &spec.partition_key,
                spec.sort_key.as_ref(),
            )))
            .set_attribute_definitions(Some(spec.attribute_definitions()))
            .build();
        let err = spec.check(&found).expect_err("must not match");
        assert!(err.contains("stream"), "{err}");
    }

    #[test]
    fn the_json_export_names_every_table_key_and_index() {
        let json = Schema::default().to_json();
        let tables = json["tables"].as_array().expect("tables array");
        assert_eq!(tables.len(), 5);
        assert_eq!(tables[0]["name"], "heatsink-liked");
        assert_eq!(tables[0]["stream"], "NEW_AND_OLD_IMAGES");
        assert_eq!(tables[4]["gsis"][0]["name"], "by-creator");
        assert_eq!(tables[2]["ttl_attribute"], "expires_at");
        assert_eq!(json["streams"][0]["shards"], 4);
    }
}

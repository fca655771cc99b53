//! Tables as data: the toolkit's own tables, and a [`TableSpec`] API for yours.
//!
//! A table is described once, as plain data ([`TableSpec`], [`StreamSpec`]); [`ensure_table`]
//! creates it if it is missing and checks it if it exists (a table with another key schema,
//! GSI or stream is a [`SchemaError::Mismatch`] naming the first difference, and is left alone).
//! The same definition feeds the capacity log ([`crate::metrics::CapacityLog`]), which must know
//! each table's partition key, and the infrastructure tests, which compare a synthesized
//! stack with the JSON export ([`schema_json`]).
//!
//! heatsink's own tables are named `prefix + logical name`, so one account can hold several
//! isolated copies (`heatsink-counters`, `t1a2b-counters`, …):
//!
//! | logical name | keys | extras | why |
//! |---|---|---|---|
//! | `counters` | `pk` / `sk` | | writer, salted and `fix` sub-keys of each counter ([`crate::counter`]) |
//! | `hotkeys` | `key` | TTL `expires_at` | hot-key directory: key → mitigation, S, epoch ([`crate::hot::directory`]) |
//! | `leases` | `app` / `shard_id` | | stream consumer leases and checkpoints |
//! | `autopilot` | `pk` / `sk` | | the autopilot's state and kill switch, one item per stream or directory ([`crate::autopilot`]) |
//! | `slots` | `pk` / `sk` | | slot directory: slot ranges → owner, epochs, moves ([`crate::slots`]); made by `heatsink slots init`, not in [`Table::ALL`] |
//!
//! Your own tables are [`TableSpec`]s built the same way:
//!
//! ```
//! use heatsink::schema::{GsiSpec, KeyAttr, StreamView, TableSpec};
//!
//! let orders = TableSpec::new("shop-orders", KeyAttr::s("customer"))
//!     .sort_key(KeyAttr::s("order"))
//!     .gsi(GsiSpec::new("by-day", KeyAttr::s("day_shard")).sort_key(KeyAttr::n("at")))
//!     .stream(StreamView::NewAndOldImages);
//! assert_eq!(orders.name, "shop-orders");
//! assert_eq!(orders.gsis[0].partition_key.name, "day_shard");
//! ```
//!
//! [`warm`] raises a table's (or a GSI's) warm throughput ahead of a predicted spike
//! (`heatsink plan --warm`).

use std::time::{Duration, Instant};

pub mod warm;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableDescription,
    TableStatus, TimeToLiveSpecification,
};
use serde::Serialize;

use crate::error::SchemaError;

/// The table-name prefix used when none is given: `heatsink-counters`, `heatsink-leases`, ….
pub const DEFAULT_PREFIX: &str = "heatsink-";

/// How long [`ensure_table`] and the wait helpers wait for a table or stream to become ACTIVE.
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
    pub name: String,
    /// Attribute type.
    #[serde(rename = "type")]
    pub kind: AttrType,
}

impl KeyAttr {
    /// A string key attribute.
    pub fn s(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: AttrType::S,
        }
    }

    /// A number key attribute.
    pub fn n(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: AttrType::N,
        }
    }

    /// A binary key attribute.
    pub fn b(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: AttrType::B,
        }
    }
}

/// A global secondary index (projection is always ALL: heatsink's GSIs serve whole items).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GsiSpec {
    /// Index name.
    pub name: String,
    /// Index partition key.
    pub partition_key: KeyAttr,
    /// Index sort key.
    pub sort_key: Option<KeyAttr>,
}

impl GsiSpec {
    /// An index `name` on `partition_key`, without a sort key.
    pub fn new(name: impl Into<String>, partition_key: KeyAttr) -> Self {
        Self {
            name: name.into(),
            partition_key,
            sort_key: None,
        }
    }

    /// The index's sort key.
    pub fn sort_key(mut self, key: KeyAttr) -> Self {
        self.sort_key = Some(key);
        self
    }
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
    /// Both images: an aggregator needs the old one to see a removal.
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

/// A table's full definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableSpec {
    /// The logical name (the part after a stack's prefix); the full name when there is none.
    #[serde(rename = "table")]
    pub logical: String,
    /// Concrete table name.
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
    pub ttl_attribute: Option<String>,
}

impl TableSpec {
    /// A table `name` keyed by `partition_key` alone, with no index, stream or TTL.
    pub fn new(name: impl Into<String>, partition_key: KeyAttr) -> Self {
        let name = name.into();
        Self {
            logical: name.clone(),
            name,
            partition_key,
            sort_key: None,
            gsis: vec![],
            stream: None,
            ttl_attribute: None,
        }
    }

    /// A table named `prefix + logical`, remembering `logical` for the JSON export.
    pub fn prefixed(prefix: &str, logical: &str, partition_key: KeyAttr) -> Self {
        Self {
            logical: logical.to_owned(),
            ..Self::new(format!("{prefix}{logical}"), partition_key)
        }
    }

    /// The table's sort key.
    pub fn sort_key(mut self, key: KeyAttr) -> Self {
        self.sort_key = Some(key);
        self
    }

    /// Adds a global secondary index.
    pub fn gsi(mut self, gsi: GsiSpec) -> Self {
        self.gsis.push(gsi);
        self
    }

    /// Turns the change stream on with `view`.
    pub fn stream(mut self, view: StreamView) -> Self {
        self.stream = Some(view);
        self
    }

    /// Items expire at the epoch seconds held in `attribute` (DynamoDB TTL).
    pub fn ttl(mut self, attribute: impl Into<String>) -> Self {
        self.ttl_attribute = Some(attribute.into());
        self
    }
}

/// A Kinesis data stream's definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamSpec {
    /// Logical name.
    pub logical: String,
    /// Concrete stream name.
    pub name: String,
    /// Provisioned shard count.
    pub shards: i32,
}

/// heatsink's own tables; a [`Schema`] turns each into a concrete [`TableSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// Counter sub-keys (`pk`, `sk`).
    Counters,
    /// Hot-key directory (`key`), TTL'd.
    Hotkeys,
    /// Stream consumer leases (`app`, `shard_id`).
    Leases,
    /// Slot directory: slot ranges → owner table, epochs, moves (`pk`, `sk`; [`crate::slots`]).
    Slots,
    /// The autopilot's state and kill switch, one item per stream or directory it governs
    /// (`pk`, `sk`; [`crate::autopilot::store`]).
    Autopilot,
}

impl Table {
    /// Every table of the toolkit a deployment creates, in creation order. [`Table::Slots`] is
    /// not among them: `heatsink slots init` creates it where live resharding is used.
    pub const ALL: [Table; 4] = [
        Table::Counters,
        Table::Hotkeys,
        Table::Leases,
        Table::Autopilot,
    ];

    /// The logical name, the part of the table name after the prefix.
    pub fn logical_name(self) -> &'static str {
        match self {
            Table::Counters => "counters",
            Table::Hotkeys => "hotkeys",
            Table::Leases => "leases",
            Table::Slots => "slots",
            Table::Autopilot => "autopilot",
        }
    }
}

/// The toolkit's tables of one installation, named with one prefix.
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
    /// A schema whose table names all start with `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The prefix every table name starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The concrete name of one of the toolkit's tables.
    pub fn table_name(&self, table: Table) -> String {
        format!("{}{}", self.prefix, table.logical_name())
    }

    /// The full definition of one of the toolkit's tables.
    pub fn table(&self, table: Table) -> TableSpec {
        let spec =
            |pk: &str| TableSpec::prefixed(&self.prefix, table.logical_name(), KeyAttr::s(pk));
        match table {
            // `touched`: writer sub-keys by their newest time bucket, write-sharded
            // (`<name>#<bucket start>#<n>`), so the rebuilder finds what changed since its last
            // run without scanning (heatsink::counter::repair).
            Table::Counters => spec("pk")
                .sort_key(KeyAttr::s("sk"))
                .gsi(GsiSpec::new("touched", KeyAttr::s("touched")).sort_key(KeyAttr::s("pk"))),
            Table::Hotkeys => spec("key").ttl("expires_at"),
            Table::Leases => spec("app").sort_key(KeyAttr::s("shard_id")),
            Table::Slots | Table::Autopilot => spec("pk").sort_key(KeyAttr::s("sk")),
        }
    }

    /// Every table definition of the toolkit, in creation order.
    pub fn tables(&self) -> Vec<TableSpec> {
        Table::ALL.iter().map(|t| self.table(*t)).collect()
    }

    /// The toolkit's tables as JSON ([`schema_json`]).
    pub fn to_json(&self) -> serde_json::Value {
        schema_json(&self.prefix, &self.tables(), &[])
    }
}

/// A stack's tables and streams as JSON: the contract infrastructure tests check their
/// resources against (`{"prefix", "tables": [TableSpec…], "streams": [StreamSpec…]}`).
pub fn schema_json(
    prefix: &str,
    tables: &[TableSpec],
    streams: &[StreamSpec],
) -> serde_json::Value {
    serde_json::json!({
        "prefix": prefix,
        "tables": tables,
        "streams": streams,
    })
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
            .filter(|a| seen.insert(a.name.as_str()))
            .filter_map(|a| {
                AttributeDefinition::builder()
                    .attribute_name(&a.name)
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
                    .attribute_name(&a.name)
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
                .find(|g| g.index_name() == Some(gsi.name.as_str()))
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

/// What [`ensure_table`] (or `ensure_stream`, feature `kinesis`) did with one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Existence {
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
    pub outcome: Existence,
}

/// Creates one table if missing and waits for it to be ACTIVE; checks it if present.
pub async fn ensure_table(
    ddb: &aws_sdk_dynamodb::Client,
    spec: &TableSpec,
) -> Result<Existence, SchemaError> {
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
            return Ok(Existence::Exists);
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
            .index_name(&gsi.name)
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
    if let Some(attr) = &spec.ttl_attribute {
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
    Ok(Existence::Created)
}

/// Creates a Kinesis stream if missing and waits for ACTIVE; checks its shard count if present.
#[cfg(feature = "kinesis")]
pub async fn ensure_stream(
    kinesis: &aws_sdk_kinesis::Client,
    spec: &StreamSpec,
) -> Result<Existence, SchemaError> {
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
            return Ok(Existence::Exists);
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_not_found_exception()) => {}
        Err(e) => return Err(SchemaError::kinesis(&spec.name, e)),
    }
    use aws_sdk_kinesis::types::{StreamMode, StreamModeDetails};
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
    Ok(Existence::Created)
}

/// Creates every table of `tables` that is missing; existing ones are checked and left alone.
///
/// A table that exists with a different shape fails with [`SchemaError::Mismatch`] naming it.
pub async fn ensure_tables(
    ddb: &aws_sdk_dynamodb::Client,
    tables: &[TableSpec],
) -> Result<Vec<Ensured>, SchemaError> {
    let mut report = vec![];
    for spec in tables {
        let outcome = ensure_table(ddb, spec).await?;
        report.push(Ensured {
            kind: "table",
            name: spec.name.clone(),
            outcome,
        });
    }
    Ok(report)
}

/// Creates every Kinesis stream of `streams` that is missing; existing ones are left alone.
#[cfg(feature = "kinesis")]
pub async fn ensure_streams(
    kinesis: &aws_sdk_kinesis::Client,
    streams: &[StreamSpec],
) -> Result<Vec<Ensured>, SchemaError> {
    let mut report = vec![];
    for spec in streams {
        let outcome = ensure_stream(kinesis, spec).await?;
        report.push(Ensured {
            kind: "stream",
            name: spec.name.clone(),
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
#[cfg(feature = "kinesis")]
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
            .is_some_and(|s| s.stream_status() == &aws_sdk_kinesis::types::StreamStatus::Active))
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
            ["t1-counters", "t1-hotkeys", "t1-leases", "t1-autopilot"]
        );
    }

    #[test]
    fn attribute_definitions_cover_every_key_once() {
        let photos = TableSpec::new("photos", KeyAttr::s("photo")).gsi(
            GsiSpec::new("by-creator", KeyAttr::s("creator_shard"))
                .sort_key(KeyAttr::s("created_at")),
        );
        let names: Vec<String> = photos
            .attribute_definitions()
            .into_iter()
            .map(|d| d.attribute_name)
            .collect();
        assert_eq!(names, ["photo", "creator_shard", "created_at"]);
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
        let spec = TableSpec::new("orders", KeyAttr::s("customer"))
            .sort_key(KeyAttr::s("order"))
            .stream(StreamView::NewAndOldImages);
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
    fn the_json_export_names_every_table_key_and_ttl() {
        let json = Schema::default().to_json();
        let tables = json["tables"].as_array().expect("tables array");
        assert_eq!(tables.len(), 4);
        assert_eq!(tables[0]["name"], "heatsink-counters");
        assert_eq!(tables[3]["name"], "heatsink-autopilot");
        assert_eq!(tables[3]["sort_key"]["name"], "sk");
        assert_eq!(tables[0]["table"], "counters");
        assert_eq!(tables[1]["ttl_attribute"], "expires_at");
        assert_eq!(tables[2]["sort_key"]["name"], "shard_id");
        assert_eq!(json["streams"].as_array().map(Vec::len), Some(0));
    }
}

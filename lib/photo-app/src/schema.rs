//! The photo app's tables and stream, on top of the toolkit's own.
//!
//! | logical name | keys | extras | why |
//! |---|---|---|---|
//! | `liked` | `user` / `post` | stream NEW_AND_OLD_IMAGES; GSI `by-post` on `post_shard` / `liked_at` (sharded `post#n`) | durable per-user like record; its change stream feeds the counters (see docs/counters.md) |
//! | `counters` | `pk` / `sk` | | the toolkit's counter sub-keys |
//! | `hotkeys` | `key` | TTL `expires_at` | the toolkit's hot-key directory |
//! | `leases` | `app` / `shard_id` | | the toolkit's stream consumer leases |
//! | `posts` | `post` | GSI `by-creator` on `creator_shard` / `created_at` | a GSI sharded `creator#n` |
//! | `autopilot` | `pk` / `sk` | | the toolkit's autopilot state and kill switch (one item per stream it governs) |
//!
//! The Kinesis stream `like-events` is where the `liked` table's changes land in production
//! (Kinesis Data Streams for DynamoDB); locally the aggregator also reads DynamoDB Streams.
//! [`Schema::to_json`] (printed by `heatsink schema --json`) is the contract the CDK and
//! Terraform tests check the deployed stack against.

use heatsink::schema::{
    self as toolkit, GsiSpec, KeyAttr, StreamSpec, StreamView, TableSpec, schema_json,
};
use serde::Serialize;

pub use heatsink::schema::DEFAULT_PREFIX;

/// The `liked` index the rebuilder recounts one post's time bucket through.
pub const BY_POST: &str = "by-post";
/// The write-sharded key of [`BY_POST`]: `<post>#<n>` ([`post_shard`]).
pub const POST_SHARD: &str = "post_shard";
/// Shards of the by-post index: a post liked 10,000 times a second (the celebrity post of docs/hot-keys.md)
/// writes 625/s to each, under an index partition's 1,000 writes/s with 1.6× headroom (16
/// shards carry 16,000/s of one post; 8 carried only 8,000/s, so at 10,000/s every like on the
/// hot post was throttled on the index). A recount reads each shard once (16 Queries per
/// post and bucket). Raising it is safe for data already written (the old shards are among the
/// new ones); lowering it is not.
pub const POST_SHARDS: u16 = 16;

/// The [`POST_SHARD`] of `user`'s like of `post`: the toolkit's one index-sharding rule,
/// [`GsiShard`](heatsink::keys::GsiShard) over [`POST_SHARDS`] spread by the user
/// (`<post>#<n>`, n = `stable_hash64(user) mod 16`), so one post's likes spread evenly over the
/// index shards. Likes stored before this rule (n from the first 4 bytes of MD5(user) instead of
/// the first 8) carry another `n` of the same 16: a recount reads all 16 shards of a post, so
/// they are counted as before (docs/counters.md, "The by-post index key"). Refuses a post id the
/// API would refuse anyway (empty, too long, or ending in `#<digits>`).
pub fn post_shard(post: &str, user: &str) -> Result<String, heatsink::keys::KeyError> {
    Ok(heatsink::keys::GsiShard::new(post, POST_SHARDS)?.key_for(user.as_bytes()))
}

/// Every table the photo app deploys: its own and the toolkit's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// Durable per-user like records (`user`, `post`), streamed.
    Liked,
    /// The toolkit's counter sub-keys (`pk`, `sk`).
    Counters,
    /// The toolkit's hot-key directory (`key`), TTL'd.
    Hotkeys,
    /// The toolkit's stream consumer leases (`app`, `shard_id`).
    Leases,
    /// Posts with a write-sharded GSI on the creator.
    Posts,
    /// The toolkit's autopilot state and kill switch (`pk`, `sk`): `like-events`' control loop.
    Autopilot,
}

impl Table {
    /// Every table, in creation order.
    pub const ALL: [Table; 6] = [
        Table::Liked,
        Table::Counters,
        Table::Hotkeys,
        Table::Leases,
        Table::Posts,
        Table::Autopilot,
    ];

    /// The logical name, the part of the table name after the prefix.
    pub fn logical_name(self) -> &'static str {
        match self {
            Table::Liked => "liked",
            Table::Posts => "posts",
            t => t.toolkit().map_or("", toolkit::Table::logical_name),
        }
    }

    /// The toolkit's table this is, if it is one of them.
    pub fn toolkit(self) -> Option<toolkit::Table> {
        match self {
            Table::Counters => Some(toolkit::Table::Counters),
            Table::Hotkeys => Some(toolkit::Table::Hotkeys),
            Table::Leases => Some(toolkit::Table::Leases),
            Table::Autopilot => Some(toolkit::Table::Autopilot),
            Table::Liked | Table::Posts => None,
        }
    }
}

/// The resources of one photo-app installation, named with one prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schema {
    toolkit: toolkit::Schema,
}

impl Schema {
    /// A schema whose resource names all start with `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            toolkit: toolkit::Schema::new(prefix),
        }
    }

    /// The toolkit's tables under the same prefix (what the directory, counters and leases use).
    pub fn toolkit(&self) -> &toolkit::Schema {
        &self.toolkit
    }

    /// The prefix every resource name starts with.
    pub fn prefix(&self) -> &str {
        self.toolkit.prefix()
    }

    /// The concrete name of a table.
    pub fn table_name(&self, table: Table) -> String {
        format!("{}{}", self.prefix(), table.logical_name())
    }

    /// The full definition of one table.
    pub fn table(&self, table: Table) -> TableSpec {
        let prefix = self.prefix();
        match (table, table.toolkit()) {
            (_, Some(t)) => self.toolkit.table(t),
            (Table::Liked, None) => TableSpec::prefixed(prefix, "liked", KeyAttr::s("user"))
                .sort_key(KeyAttr::s("post"))
                .gsi(
                    GsiSpec::new(BY_POST, KeyAttr::s(POST_SHARD))
                        .sort_key(KeyAttr::n(crate::mapper::LIKED_AT)),
                )
                .stream(StreamView::NewAndOldImages),
            (_, None) => TableSpec::prefixed(prefix, "posts", KeyAttr::s("post")).gsi(
                GsiSpec::new("by-creator", KeyAttr::s("creator_shard"))
                    .sort_key(KeyAttr::s("created_at")),
            ),
        }
    }

    /// Every table definition, in creation order.
    pub fn tables(&self) -> Vec<TableSpec> {
        Table::ALL.iter().map(|t| self.table(*t)).collect()
    }

    /// The Kinesis stream the `liked` table's changes flow into in production.
    pub fn like_events(&self) -> StreamSpec {
        StreamSpec {
            logical: "like-events".into(),
            name: format!("{}like-events", self.prefix()),
            // infra/esm.json, the one definition the stacks and the demo read.
            shards: i32::try_from(crate::esm::SHARDS).unwrap_or(i32::MAX),
        }
    }

    /// Every stream definition.
    pub fn streams(&self) -> Vec<StreamSpec> {
        vec![self.like_events()]
    }

    /// The deployment as JSON, the contract the CDK and Terraform tests check against.
    pub fn to_json(&self) -> serde_json::Value {
        schema_json(self.prefix(), &self.tables(), &self.streams())
    }
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
                "t1-posts",
                "t1-autopilot"
            ]
        );
        assert_eq!(schema.like_events().name, "t1-like-events");
    }

    #[test]
    fn the_json_export_names_every_table_key_and_index() {
        let json = Schema::default().to_json();
        let tables = json["tables"].as_array().expect("tables array");
        assert_eq!(tables.len(), 6);
        assert_eq!(tables[0]["name"], "heatsink-liked");
        assert_eq!(tables[0]["table"], "liked");
        assert_eq!(tables[0]["stream"], "NEW_AND_OLD_IMAGES");
        assert_eq!(tables[4]["gsis"][0]["name"], "by-creator");
        assert_eq!(tables[2]["ttl_attribute"], "expires_at");
        assert_eq!(json["streams"][0]["shards"], crate::esm::SHARDS);
    }

    #[test]
    fn the_toolkits_tables_are_the_same_definitions() {
        let schema = Schema::new("p-");
        assert_eq!(
            schema.table(Table::Counters),
            schema.toolkit().table(toolkit::Table::Counters)
        );
        assert_eq!(schema.table_name(Table::Leases), "p-leases");
    }
}

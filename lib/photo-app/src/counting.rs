//! What the aggregator and rebuilder functions count, from their environment, so a team can
//! deploy them for its own counters without writing a line.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `HEATSINK_COUNTER` | `likes` | counter name: items are `counter#<value>` in the counters table |
//! | `HEATSINK_COUNT_BY` | `post` | the string attribute whose value is counted |
//! | `HEATSINK_EVENTS_TABLE` | `<prefix>liked` | the table of durable events the rebuilder recounts |
//! | `HEATSINK_EVENT_TIME_ATTRIBUTE` | `liked_at` | Unix ms at which an event became durable |
//! | `HEATSINK_COUNTERS_TABLE` | `<prefix>counters` | where counters are flushed |
//!
//! With every variable unset the functions count the photo app's likes with its own mapper
//! ([`LikeMapper`], which also checks post and user ids); with `HEATSINK_COUNTER` or
//! `HEATSINK_COUNT_BY` set they count any table with the toolkit's [`CountBy`].

use heatsink::counter::aggregate::{ChangeMapper, CountBy};
use heatsink::counter::rebuild::ScanRecount;
use heatsink::counter::repair::GsiRecount;

use crate::mapper::{COUNTER, LIKED_AT, LikeMapper};
use crate::schema::{POST_SHARDS, Schema, Table};

/// What to count and where, for the aggregator and rebuilder functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counting {
    /// Counter name (`likes`).
    pub counter: String,
    /// The attribute counted (`post`).
    pub count_by: String,
    /// The table of durable events (`<prefix>liked`).
    pub events_table: String,
    /// The events' time attribute (`liked_at`).
    pub time_attribute: String,
    /// The counters table (`<prefix>counters`).
    pub counters_table: String,
}

impl Counting {
    /// The photo app's likes under `schema`.
    pub fn likes(schema: &Schema) -> Self {
        Self {
            counter: COUNTER.into(),
            count_by: "post".into(),
            events_table: schema.table_name(Table::Liked),
            time_attribute: LIKED_AT.into(),
            counters_table: schema.table_name(Table::Counters),
        }
    }

    /// [`Counting::likes`] with every variable of the module docs that is set (`var` reads one).
    pub fn from_vars(schema: &Schema, var: impl Fn(&str) -> Option<String>) -> Self {
        let likes = Self::likes(schema);
        Self {
            counter: var("HEATSINK_COUNTER").unwrap_or(likes.counter),
            count_by: var("HEATSINK_COUNT_BY").unwrap_or(likes.count_by),
            events_table: var("HEATSINK_EVENTS_TABLE").unwrap_or(likes.events_table),
            time_attribute: var("HEATSINK_EVENT_TIME_ATTRIBUTE").unwrap_or(likes.time_attribute),
            counters_table: var("HEATSINK_COUNTERS_TABLE").unwrap_or(likes.counters_table),
        }
    }

    /// [`Counting::from_vars`] over the process environment.
    pub fn from_env(schema: &Schema) -> Self {
        Self::from_vars(schema, |name| std::env::var(name).ok())
    }

    /// True when this counts the photo app's likes.
    pub fn is_likes(&self) -> bool {
        self.counter == COUNTER && self.count_by == "post"
    }

    /// The mapper: [`LikeMapper`] for likes, [`CountBy`] otherwise.
    pub fn mapper(&self) -> Box<dyn ChangeMapper> {
        if self.is_likes() {
            Box::new(LikeMapper)
        } else {
            Box::new(CountBy::new(&self.counter, &self.count_by).with_time(&self.time_attribute))
        }
    }

    /// The rebuilder's per-bucket recount: the events table's write-sharded index
    /// `by-<count_by>` on `<count_by>_shard` / the time attribute (for likes: `by-post` on
    /// `post_shard` / `liked_at`), [`POST_SHARDS`] shards; ids the likes mapper rejects are
    /// never corrected.
    pub fn bucket_recount(&self, ddb: &aws_sdk_dynamodb::Client) -> GsiRecount {
        let recount = GsiRecount::new(
            ddb,
            &self.events_table,
            format!("by-{}", self.count_by),
            format!("{}_shard", self.count_by),
            &self.time_attribute,
            POST_SHARDS,
        );
        if self.is_likes() {
            recount.accepting(|id| crate::id::check("post", id).is_ok())
        } else {
            recount
        }
    }

    /// The rebuilder's whole-table recount of the events table (`heatsink rebuild`).
    pub fn recount(&self, ddb: &aws_sdk_dynamodb::Client) -> ScanRecount {
        ScanRecount::new(
            ddb,
            &self.events_table,
            &self.count_by,
            &self.time_attribute,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn unset_variables_count_likes_and_set_ones_count_your_table() {
        let schema = Schema::new("p-");
        let none = Counting::from_vars(&schema, |_| None);
        assert!(none.is_likes());
        assert_eq!(none.events_table, "p-liked");
        assert_eq!(none.counters_table, "p-counters");
        let vars = HashMap::from([
            ("HEATSINK_COUNTER", "orders"),
            ("HEATSINK_COUNT_BY", "product"),
            ("HEATSINK_EVENTS_TABLE", "shop-orders"),
        ]);
        let mine = Counting::from_vars(&schema, |n| vars.get(n).map(|v| v.to_string()));
        assert!(!mine.is_likes());
        assert_eq!(
            (
                mine.counter.as_str(),
                mine.count_by.as_str(),
                mine.events_table.as_str()
            ),
            ("orders", "product", "shop-orders")
        );
        let change = serde_json::json!({"eventName": "INSERT",
            "dynamodb": {"NewImage": {"product": {"S": "p9"}}}});
        let (key, delta) = mine.mapper().map(&change).expect("maps").expect("counts");
        assert_eq!((key.to_string().as_str(), delta), ("orders#p9", 1));
    }
}

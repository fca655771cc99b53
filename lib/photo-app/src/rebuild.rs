//! The likes rebuilder: the toolkit's rebuild rules over recounts of the `liked` table.
//!
//! - [`repair`] (the scheduled `count-rebuilder`): per-minute buckets of the posts liked since
//!   the last run, recounted through `liked`'s write-sharded `by-post` index and corrected only
//!   once the aggregator's flushed watermarks prove it processed every like the recount saw
//!   ([`heatsink::counter::repair::Repair`]). A post liked without pause is repaired too.
//! - [`rebuild`] (`heatsink rebuild`, the demo): a whole-table recount for when the aggregator
//!   is known to be drained (writes stopped).
//!
//! [`LikedRecount`] is the toolkit's [`ScanRecount`] of `liked` by `post`, dated by
//! `liked_at` (a like stored before `liked_at` existed counts as old). [`rebuild`] corrects
//! every settled post's `fix` with it.

use heatsink::counter::rebuild::{self as rule, ScanRecount};
use heatsink::counter::repair::Repair;

use crate::mapper::{COUNTER, LIKED_AT};
use crate::schema::{Schema, Table};

pub use heatsink::counter::rebuild::{RebuildError, RebuildOptions, RebuildReport};
pub use heatsink::counter::repair::{GsiRecount, RepairOptions, RepairReport};

/// The per-bucket recount of `schema`'s `liked` table through its `by-post` index.
pub fn liked_bucket_recount(ddb: &aws_sdk_dynamodb::Client, schema: &Schema) -> GsiRecount {
    crate::counting::Counting::likes(schema).bucket_recount(ddb)
}

/// One incremental repair run of the likes counters (see the module docs), judging only on
/// progress proven by every shard `lineage` lists (the stream the aggregator reads).
pub async fn repair(
    counters: &heatsink::counter::CounterStore,
    recount: &GsiRecount,
    options: RepairOptions,
    lineage: &dyn heatsink::counter::lineage::ShardListing,
) -> Result<RepairReport, RebuildError> {
    Repair::new(counters, COUNTER, recount, options)
        .with_lineage(lineage)
        .run()
        .await
}

/// Every post's durable likes, counted from the `liked` table.
pub type LikedRecount = ScanRecount;

/// The recount of `schema`'s `liked` table: its items per `post`, dated by `liked_at`.
pub fn liked_recount(ddb: &aws_sdk_dynamodb::Client, schema: &Schema) -> LikedRecount {
    ScanRecount::new(ddb, schema.table_name(Table::Liked), "post", LIKED_AT)
}

/// A likes rebuild in progress ([`rule::Rebuild`] with the `liked` recount): [`Rebuild::begin`]
/// reads every `likes#` counter, [`Rebuild::finish`] recounts and corrects. They are separate so a
/// test can land a flush in between and see the post left alone rather than mis-corrected.
#[derive(Debug)]
pub struct Rebuild {
    rule: rule::Rebuild,
    recount: LikedRecount,
}

impl Rebuild {
    /// Reads every existing likes counter (one Query each) before anything is counted.
    pub async fn begin(
        ddb: &aws_sdk_dynamodb::Client,
        schema: &Schema,
        options: RebuildOptions,
    ) -> Result<Self, RebuildError> {
        let counters = schema.table_name(Table::Counters);
        Ok(Self {
            rule: rule::Rebuild::begin(ddb, &counters, COUNTER, options).await?,
            recount: liked_recount(ddb, schema),
        })
    }

    /// Counts the durable likes and corrects every settled post's `fix`.
    pub async fn finish(self) -> Result<RebuildReport, RebuildError> {
        self.rule.finish(&self.recount).await
    }
}

/// Recounts every post's likes from `liked` and writes the difference into `fix` (settled
/// posts only; see [`heatsink::counter::rebuild`]).
pub async fn rebuild(
    ddb: &aws_sdk_dynamodb::Client,
    schema: &Schema,
    options: RebuildOptions,
) -> Result<RebuildReport, RebuildError> {
    Rebuild::begin(ddb, schema, options).await?.finish().await
}

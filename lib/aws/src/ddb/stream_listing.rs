//! One DynamoDB Streams shard listing: DescribeStream paged, kept between syncs, and paced.
//!
//! DescribeStream allows 10 calls per second per account and Region, and a stream that rolls
//! its shards every few hours lists thousands of closed ones within its 24 h retention. So a
//! listing keeps what it saw: a sync pages only from the last shard it knew to be closed before
//! the first open one (`ExclusiveStartShardId`), which re-reads the open shards and whatever is
//! new; every [`StreamListing::FULL_LISTING_EVERY`]th sync pages the whole stream so shards
//! trimmed past retention drop out. Calls of one listing are spaced at least
//! [`StreamListing::MIN_DESCRIBE_INTERVAL`] apart (10 per second). The consumer's source syncs
//! through it, the slot mover's tails keep one per stream they read, and the stream
//! aggregator's shard lookup lists through a fresh one.

use std::sync::Arc;
use std::time::Duration;

use heatsink_core::stream::ShardInfo;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::AwsError;

const SERVICE: &str = "DynamoDB Streams";

/// The shards of one stream as last synced, shared by clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamListing {
    known: Arc<Mutex<Known>>,
}

/// What the listing remembers between syncs.
#[derive(Debug, Default)]
struct Known {
    shards: Vec<ShardInfo>,
    syncs: u64,
    last_call: Option<Instant>,
}

impl StreamListing {
    /// Every this many syncs the whole stream is paged (to see shards trimmed past retention).
    pub(crate) const FULL_LISTING_EVERY: u64 = 10;

    /// Least time between two DescribeStream calls of one listing (10 per second at most).
    pub(crate) const MIN_DESCRIBE_INTERVAL: Duration = Duration::from_millis(100);

    /// Every shard of stream `arn`, in DescribeStream's order (parents before children),
    /// synced through `client`: closed shards known before the first open one are not read
    /// again, except on every [`Self::FULL_LISTING_EVERY`]th sync.
    pub(crate) async fn sync(
        &self,
        client: &aws_sdk_dynamodbstreams::Client,
        arn: &str,
    ) -> Result<Vec<ShardInfo>, AwsError> {
        let mut known = self.known.lock().await;
        known.syncs += 1;
        let full = known.shards.is_empty() || known.syncs % Self::FULL_LISTING_EVERY == 0;
        // The last closed shard before the first open one: everything up to it is settled.
        let first_open = known.shards.iter().position(|s| !s.is_closed());
        let start = match first_open {
            Some(i) if !full && i > 0 => Some(known.shards[i - 1].shard_id.clone()),
            None if !full => known.shards.last().map(|s| s.shard_id.clone()),
            _ => None,
        };
        let fresh = describe_from(client, arn, &mut known, start.clone()).await?;
        let shards = match start {
            None => fresh,
            Some(after) => {
                let keep = known
                    .shards
                    .iter()
                    .position(|s| s.shard_id == after)
                    .map_or(0, |i| i + 1);
                let mut shards: Vec<ShardInfo> = known.shards[..keep].to_vec();
                shards.extend(fresh);
                shards
            }
        };
        known.shards = shards.clone();
        Ok(shards)
    }
}

/// Pages DescribeStream from after `start` (from the first shard if `None`), paced.
async fn describe_from(
    client: &aws_sdk_dynamodbstreams::Client,
    arn: &str,
    known: &mut Known,
    mut start: Option<String>,
) -> Result<Vec<ShardInfo>, AwsError> {
    let mut shards = Vec::new();
    loop {
        if let Some(last) = known.last_call {
            tokio::time::sleep_until(last + StreamListing::MIN_DESCRIBE_INTERVAL).await;
        }
        known.last_call = Some(Instant::now());
        let out = client
            .describe_stream()
            .stream_arn(arn)
            .set_exclusive_start_shard_id(start.take())
            .send()
            .await
            .map_err(|e| AwsError::new(SERVICE, "DescribeStream", arn, e))?;
        let Some(desc) = out.stream_description() else {
            return Ok(shards);
        };
        for s in desc.shards() {
            let Some(id) = s.shard_id() else { continue };
            let seqs = s.sequence_number_range();
            shards.push(ShardInfo {
                parent: s.parent_shard_id().map(str::to_owned),
                starting_seq: seqs.and_then(|r| r.starting_sequence_number().map(str::to_owned)),
                ending_seq: seqs.and_then(|r| r.ending_sequence_number().map(str::to_owned)),
                ..ShardInfo::new(id)
            });
        }
        match desc.last_evaluated_shard_id() {
            Some(last) if !last.is_empty() => start = Some(last.to_owned()),
            _ => return Ok(shards),
        }
    }
}

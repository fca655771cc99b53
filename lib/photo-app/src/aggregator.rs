//! The likes aggregator: the toolkit's stream-batch aggregator over the [`LikeMapper`].
//!
//! It reads the `liked` table's change records (DynamoDB Streams locally, Kinesis Data Streams
//! for DynamoDB in production), sums each batch per post and flushes absolute totals per
//! stream shard into `counters` ([`heatsink::counter::aggregate`] has the guarantees).

use heatsink::counter::CounterStore;
use heatsink::counter::aggregate::StreamAggregator;

use crate::mapper::LikeMapper;

pub use heatsink::counter::aggregate::{AggregateError, AggregateReport};

/// The likes aggregator.
pub type Aggregator = StreamAggregator<LikeMapper>;

/// An aggregator counting likes into `counters`; `streams` resolves DynamoDB Streams shard ids.
pub fn aggregator(
    counters: CounterStore,
    streams: Option<aws_sdk_dynamodbstreams::Client>,
) -> Aggregator {
    StreamAggregator::new(counters, LikeMapper, streams).with_progress(crate::mapper::COUNTER)
}

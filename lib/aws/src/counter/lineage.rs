//! The stream's shards, as the counter path needs them: every shard that could hold a change is
//! a writer that must prove progress ([`heatsink_core::counter::progress`]), and a parent is
//! retired once every child has a watermark ([`heatsink_core::counter::retire_due`]).
//!
//! [`ShardListing`] is what the repair and the aggregator ask: "the shards, listed no earlier
//! than this". [`Shards`] answers it from a fixed list (tests, a stream that never reshards);
//! [`LineageCache`] (feature `streams`) lists a Kinesis stream (`ListShards`) or a DynamoDB
//! stream (`DescribeStream`) through its [`ShardSource`](crate::stream::ShardSource), cached and
//! paced: a listing younger than [`LineageCache::max_age`] is reused, and a refresh asked for
//! (a shard the cache does not know, watermarks newer than the listing) happens at most once
//! per [`LineageCache::min_interval`] per process. With the defaults (60 s, 1 s) one aggregator
//! instance per shard makes at most one listing call a second while shards change and one a
//! minute otherwise, far inside ListShards' and DescribeStream's limits; the rebuilder makes
//! one per run.

use futures::future::BoxFuture;
/// A shard as the lineage lists it (id, parents, whether it is closed).
pub use heatsink_core::stream::ShardInfo;

use super::rebuild::BoxError;

/// A listing of a stream's shards and when it was taken.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// Every shard the stream lists (closed ones within its retention included).
    pub shards: Vec<ShardInfo>,
    /// When the listing was taken (Unix ms; `u64::MAX` for a fixed list, which never gets
    /// older than anything it is compared with).
    pub taken_ms: u64,
}

/// Where the counter path gets a stream's shards.
pub trait ShardListing: Send + Sync {
    /// The shards, from a listing taken at or after `not_before_ms` when the source can give
    /// one (its pace may return an older one: compare [`Listing::taken_ms`]).
    fn list(&self, not_before_ms: u64) -> BoxFuture<'_, Result<Listing, BoxError>>;
}

impl std::fmt::Debug for dyn ShardListing + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShardListing")
    }
}

/// A fixed list of shards: a stream that never reshards, or a test's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shards(pub Vec<ShardInfo>);

impl Shards {
    /// Open root shards with these ids (a Kinesis stream before any reshard).
    pub fn open<I: IntoIterator<Item = S>, S: Into<String>>(ids: I) -> Self {
        Self(ids.into_iter().map(ShardInfo::new).collect())
    }
}

impl ShardListing for Shards {
    fn list(&self, _: u64) -> BoxFuture<'_, Result<Listing, BoxError>> {
        Box::pin(async move {
            Ok(Listing {
                shards: self.0.clone(),
                taken_ms: u64::MAX,
            })
        })
    }
}

// The redrive's, which needs both features.
#[cfg(all(feature = "streams", feature = "lambda"))]
pub(crate) use cache::kinesis_stream_name;
#[cfg(feature = "streams")]
pub use cache::{LineageCache, for_stream_arn};

#[cfg(feature = "streams")]
mod cache {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::stream::ShardSource;

    #[derive(Debug, Default)]
    struct State {
        listing: Option<(Listing, Instant)>,
        last_call: Option<Instant>,
    }

    /// A [`ShardSource`]'s listing, cached and paced (see the module docs).
    #[derive(Debug)]
    pub struct LineageCache<S> {
        source: S,
        state: Mutex<State>,
        max_age: Duration,
        min_interval: Duration,
    }

    impl<S: ShardSource> LineageCache<S> {
        /// Lists `source`, reusing a listing for up to 60 s and refreshing at most once a second.
        pub fn new(source: S) -> Self {
            Self {
                source,
                state: Mutex::new(State::default()),
                max_age: Duration::from_secs(60),
                min_interval: Duration::from_secs(1),
            }
        }

        /// Reuses a listing for up to `max_age`.
        pub fn max_age(mut self, max_age: Duration) -> Self {
            self.max_age = max_age;
            self
        }

        /// Lists at most once per `min_interval`.
        pub fn min_interval(mut self, min_interval: Duration) -> Self {
            self.min_interval = min_interval;
            self
        }

        /// The source.
        pub fn source(&self) -> &S {
            &self.source
        }

        /// The cached listing if it is fresh enough for `not_before_ms`, or if the pace forbids
        /// a call now; `None`: call.
        fn cached(&self, not_before_ms: u64) -> Option<Listing> {
            let state = self.state.lock().ok()?;
            let (listing, at) = state.listing.as_ref()?;
            let young = at.elapsed() < self.max_age && listing.taken_ms >= not_before_ms;
            let paced = state
                .last_call
                .is_some_and(|c| c.elapsed() < self.min_interval);
            (young || paced).then(|| listing.clone())
        }

        async fn refresh(&self) -> Result<Listing, BoxError> {
            if let Ok(mut s) = self.state.lock() {
                s.last_call = Some(Instant::now());
            }
            let taken_ms = crate::clock::now_ms();
            let shards = self.source.list_shards().await?;
            let listing = Listing { shards, taken_ms };
            if let Ok(mut s) = self.state.lock() {
                s.listing = Some((listing.clone(), Instant::now()));
            }
            Ok(listing)
        }
    }

    /// The cached, paced listing of the stream with ARN `arn`: a Kinesis data stream
    /// (`arn:aws:kinesis:…:stream/<name>`, listed with ListShards) or a DynamoDB stream
    /// (`arn:aws:dynamodb:…:table/<table>/stream/<label>`, listed with DescribeStream). An
    /// ARN of anything else is refused with what was expected.
    pub fn for_stream_arn(
        config: &aws_types::SdkConfig,
        arn: &str,
    ) -> Result<std::sync::Arc<dyn ShardListing>, String> {
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        match parts.as_slice() {
            ["arn", _, "kinesis", _, _, _] => {
                let name = kinesis_stream_name(arn)
                    .ok_or_else(|| format!("{arn}: not a Kinesis stream ARN (…:stream/<name>)"))?;
                let client = aws_sdk_kinesis::Client::new(config);
                Ok(std::sync::Arc::new(LineageCache::new(
                    crate::stream::KinesisSource::new(client, name),
                )))
            }
            ["arn", _, "dynamodb", _, _, resource] if resource.contains("/stream/") => {
                let client = aws_sdk_dynamodbstreams::Client::new(config);
                Ok(std::sync::Arc::new(LineageCache::new(
                    crate::stream::DynamoDbStreamsSource::new(client, arn),
                )))
            }
            _ => Err(format!(
                "{arn}: not a stream ARN (a Kinesis stream's or a table's LatestStreamArn)"
            )),
        }
    }

    /// The stream name of a Kinesis stream ARN (`arn:aws:kinesis:…:stream/<name>`); `None` for
    /// anything else.
    pub(crate) fn kinesis_stream_name(arn: &str) -> Option<&str> {
        match arn.splitn(6, ':').collect::<Vec<_>>().as_slice() {
            ["arn", _, "kinesis", _, _, resource] => resource
                .strip_prefix("stream/")
                .filter(|n| !n.is_empty() && !n.contains('/')),
            _ => None,
        }
    }

    impl<S: ShardSource> ShardListing for LineageCache<S> {
        fn list(&self, not_before_ms: u64) -> BoxFuture<'_, Result<Listing, BoxError>> {
            Box::pin(async move {
                match self.cached(not_before_ms) {
                    Some(listing) => Ok(listing),
                    None => self.refresh().await,
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "streams")]
    #[test]
    fn only_stream_arns_are_listed() {
        let config = aws_types::SdkConfig::builder()
            .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
            .build();
        assert!(
            for_stream_arn(&config, "arn:aws:kinesis:eu-west-1:1:stream/p-like-events").is_ok()
        );
        assert!(
            for_stream_arn(
                &config,
                "arn:aws:dynamodb:eu-west-1:1:table/p-liked/stream/2026-12-05T00:00:00.000"
            )
            .is_ok()
        );
        for bad in [
            "arn:aws:kinesis:eu-west-1:1:stream/",
            "arn:aws:dynamodb:eu-west-1:1:table/p-liked",
            "like-events",
        ] {
            assert!(for_stream_arn(&config, bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_fixed_list_is_never_older_than_anything() {
        let shards = Shards::open(["shardId-0", "shardId-1"]);
        let listing = shards.list(u64::MAX - 1).await.expect("list");
        assert_eq!(listing.shards.len(), 2);
        assert_eq!(listing.taken_ms, u64::MAX);
    }

    #[cfg(feature = "streams")]
    #[tokio::test]
    async fn a_listing_is_reused_while_young_and_refreshed_at_most_once_per_interval() {
        use aws_sdk_kinesis::operation::list_shards::ListShardsOutput;
        use aws_sdk_kinesis::types::{HashKeyRange, SequenceNumberRange, Shard};
        use aws_smithy_mocks::mock;

        let shard = |id: &str| {
            Shard::builder()
                .shard_id(id)
                .hash_key_range(
                    HashKeyRange::builder()
                        .starting_hash_key("0")
                        .ending_hash_key("9")
                        .build()
                        .expect("range"),
                )
                .sequence_number_range(
                    SequenceNumberRange::builder()
                        .starting_sequence_number("1")
                        .build()
                        .expect("seq"),
                )
                .build()
                .expect("shard")
        };
        let first = mock!(aws_sdk_kinesis::Client::list_shards).then_output(move || {
            ListShardsOutput::builder()
                .shards(shard("shardId-0"))
                .build()
        });
        let second = mock!(aws_sdk_kinesis::Client::list_shards).then_output(move || {
            ListShardsOutput::builder()
                .shards(shard("shardId-0"))
                .shards(shard("shardId-1"))
                .build()
        });
        let client = aws_smithy_mocks::mock_client!(
            aws_sdk_kinesis,
            aws_smithy_mocks::RuleMode::Sequential,
            [&first, &second]
        );
        let cache = LineageCache::new(crate::stream::KinesisSource::new(client, "like-events"))
            .min_interval(std::time::Duration::from_millis(200));
        let a = cache.list(0).await.expect("list");
        assert_eq!(a.shards.len(), 1);
        // Young: reused, even when asked for a listing newer than it (the pace holds).
        let b = cache.list(a.taken_ms + 1).await.expect("list");
        assert_eq!(b, a);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        // Past the interval, a listing newer than the cached one is fetched.
        let c = cache.list(a.taken_ms + 1).await.expect("list");
        assert_eq!(c.shards.len(), 2);
        // A request the cached listing satisfies makes no call (the mock has no third answer).
        assert_eq!(cache.list(0).await.expect("list"), c);
    }
}

//! Kinesis placement: which shard a partition key lands on, and salts that spread a hot key.
//!
//! Kinesis hashes a partition key with MD5 into 0..2^128 and sends the record to the open shard
//! whose hash-key range holds it ([`heatsink_core::keys::kinesis_hash_key`]). Because that hash
//! is public, a hot key's salts can be *chosen* to land on distinct shards instead of hoping:
//! where the slot function is known, check where each sub-key lands (docs/write-sharding.md).
//! This module reads the open shards' ranges from the stream and feeds them to the pure
//! placement code.

use aws_sdk_kinesis::types::{ShardFilter, ShardFilterType};
use heatsink_core::keys::{KeyError, ShardRange, parse_hash_key, validate_shards};

use crate::error::describe;

/// Errors of Kinesis placement.
#[derive(Debug, thiserror::Error)]
pub enum KinesisError {
    /// Kinesis refused the call or could not be reached.
    #[error("Kinesis call on {stream} failed: {message}")]
    Call {
        /// Stream name.
        stream: String,
        /// The SDK error with its cause chain.
        message: String,
    },
    /// The shard map Kinesis returned is not usable (gaps, overlaps, bad numbers).
    #[error("shard map of {stream}: {source}")]
    ShardMap {
        /// Stream name.
        stream: String,
        /// What is wrong.
        source: KeyError,
    },
}

/// The open shards of `stream`, sorted by starting hash key, validated to cover 0..2^128 once.
pub async fn open_shard_ranges(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<Vec<ShardRange>, KinesisError> {
    let call_err = |e: &dyn std::error::Error| KinesisError::Call {
        stream: stream.to_owned(),
        message: describe(&e),
    };
    let map_err = |source| KinesisError::ShardMap {
        stream: stream.to_owned(),
        source,
    };
    let mut ranges = vec![];
    let mut next: Option<String> = None;
    loop {
        let req = match &next {
            Some(token) => kinesis.list_shards().next_token(token),
            None => kinesis.list_shards().stream_name(stream).shard_filter(
                ShardFilter::builder()
                    .r#type(ShardFilterType::AtLatest)
                    .build()
                    .map_err(|e| call_err(&e))?,
            ),
        };
        let out = req.send().await.map_err(|e| call_err(&e))?;
        for shard in out.shards() {
            // AT_LATEST lists open shards; the ending-sequence check guards emulators that ignore it.
            if shard
                .sequence_number_range()
                .and_then(|r| r.ending_sequence_number())
                .is_some()
            {
                continue;
            }
            let Some(range) = shard.hash_key_range() else {
                continue;
            };
            ranges.push(ShardRange::new(
                shard.shard_id(),
                parse_hash_key(range.starting_hash_key()).map_err(map_err)?,
                parse_hash_key(range.ending_hash_key()).map_err(map_err)?,
            ));
        }
        next = out.next_token;
        if next.is_none() {
            break;
        }
    }
    ranges.sort_by_key(|r| r.start);
    validate_shards(&ranges).map_err(map_err)?;
    Ok(ranges)
}

//! The KPL aggregated-record format: many user records in one Kinesis record.
//!
//! The Kinesis Producer Library packs user records bound for one shard into one Kinesis
//! record, so a producer is billed and throttled per aggregate instead of per user record. An
//! aggregate is
//!
//! ```text
//! F3 89 9A C2 | protobuf AggregatedRecord | MD5(protobuf bytes), 16 bytes
//! ```
//!
//! where `AggregatedRecord` holds a partition-key table, an explicit-hash-key table and the
//! user records, each naming its keys by index (the messages are in `kpl/proto.rs`). A record
//! that does not start with the magic is a plain record: [`deaggregate`] passes it through as
//! one user record with sub-sequence 0, as the KCL does.
//!
//! Consumers checkpoint a user record by (sequence number, [`SubRecord::sub_sequence`]), the
//! position of the user record in its aggregate, so a restart resumes inside an aggregate.
//!
//! Three ways out, with the same checks: [`Deaggregator::open`] checks a record and walks its
//! user records lazily ([`UserRecords::iter`]: nothing allocated per user record; the way to
//! read records from outside under a memory budget, as `heatsink::stream`'s worker does),
//! [`deaggregate_ref`] / [`Deaggregator::deaggregate_ref`] collect them borrowed from the input
//! ([`SubRecordRef`]), and [`deaggregate`] / [`Deaggregator::deaggregate`] copy them out
//! ([`SubRecord`]).
//!
//! ```
//! use heatsink_core::kpl::{Aggregator, deaggregate, deaggregate_ref};
//!
//! let mut agg = Aggregator::new();
//! assert!(agg.try_add("p9", None, b"like 1")?);
//! assert!(agg.try_add("p9#3", Some("170141183460469231731687303715884105728"), b"like 2")?);
//! let record = agg.finish().expect("two records were added");
//! assert_eq!(record.partition_key, "p9"); // the first user record routes the aggregate
//! assert_eq!(record.user_records, 2);
//!
//! let out = deaggregate(&record.data, &record.partition_key)?;
//! assert_eq!(out[1].partition_key, "p9#3");
//! assert_eq!(out[1].data, b"like 2");
//! assert_eq!(out[1].sub_sequence, 1);
//!
//! let borrowed = deaggregate_ref(&record.data, &record.partition_key)?;
//! assert_eq!(borrowed[1].data, b"like 2"); // a slice of `record.data`, not a copy
//! # Ok::<(), heatsink_core::kpl::KplError>(())
//! ```
//!
//! Guarantees and limits:
//! - Any byte string is either decoded or refused with a [`KplError`]; nothing panics
//!   (property-tested over arbitrary bytes, with and without a valid magic and MD5).
//! - Bounds, each refused with its own error before anything is delivered: every key-table
//!   entry at most 256 characters ([`MAX_PARTITION_KEY_CHARS`], Kinesis's rule), each table at
//!   most one entry per user record, every user record with its required fields, so at most
//!   one user record per [`MIN_SUB_RECORD_BYTES`] (6) bytes; the fields are counted before
//!   anything is allocated, and [`Deaggregator::open`] holds at most 10 × the record's size
//!   (its tables), nothing per user record.
//! - A refused aggregate delivers nothing (all checks run before the first sub-record is
//!   returned), so a consumer can report it and move on without a partial, duplicate replay.
//! - The KCL treats an aggregate whose MD5 or protobuf is bad as a plain record and delivers
//!   the raw bytes; here that is [`KplError::BadDigest`] / [`KplError::Malformed`], so corrupt
//!   bytes are never mistaken for user data.
//! - Sub-records whose hash key falls outside the shard are delivered and counted by default;
//!   [`OutOfRange::DropAggregate`] is the KCL's behaviour (the whole aggregate is dropped).
//! - Cost: one MD5 over the aggregate body (about 2 ns per byte, which dominates above
//!   ~100-byte records) plus ~50 ns per 32-byte sub-record borrowed (`BENCHMARKS.md`); a shard
//!   check adds one MD5 per distinct partition key, not per sub-record.
//! - Records over 1,048,576 bytes ([`MAX_RECORD_BYTES`], Kinesis's record limit) are refused.
//!   [`Aggregator`] keeps aggregates within 51,200 bytes by default (the KPL's
//!   `AggregationMaxSize`) and within 1 MiB at most, counting data plus partition key as
//!   Kinesis does, and encodes byte for byte as the KPL does (golden-tested against other
//!   implementations).

mod decode;
mod encode;
mod error;
mod proto;
#[cfg(test)]
mod tests;
mod wire;

pub use decode::{
    Deaggregated, DeaggregatedRef, Deaggregator, OutOfRange, SubRecord, SubRecordRef, Tag,
    UserRecords, deaggregate, deaggregate_ref, is_aggregated,
};
pub use encode::{Aggregate, Aggregator};
pub use error::KplError;

/// The four bytes every KPL aggregate starts with.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// Length of the MD5 trailer.
pub const DIGEST_LEN: usize = 16;

/// Kinesis's limit on one record: data plus partition key, 1 MiB.
pub const MAX_RECORD_BYTES: usize = 1_048_576;

/// The KPL's default `AggregationMaxSize`: aggregates of at most 51,200 bytes.
pub const DEFAULT_MAX_AGGREGATE_BYTES: usize = 51_200;

/// Kinesis's limit on a partition key: 256 Unicode characters. The decoder holds every entry of
/// an aggregate's key tables to it.
pub const MAX_PARTITION_KEY_CHARS: usize = 256;

/// The fewest bytes a user record takes inside an aggregate: its field key and length (2), its
/// partition-key index (2) and its data's key and length (2), for empty data and an index
/// below 128. The decoder requires both fields, so an aggregate of `n` body bytes holds at most
/// `n / 6` user records.
pub const MIN_SUB_RECORD_BYTES: usize = 6;

/// The hash key Kinesis routes a record by: its explicit hash key if given, else MD5 of its
/// partition key.
pub fn effective_hash_key(
    partition_key: &str,
    explicit_hash_key: Option<&str>,
) -> Result<u128, KplError> {
    match explicit_hash_key {
        Some(e) => parse_explicit_hash_key(e),
        None => Ok(hash_of(partition_key)),
    }
}

pub(crate) fn hash_of(partition_key: &str) -> u128 {
    crate::keys::kinesis_hash_key(partition_key)
}

pub(crate) fn parse_explicit_hash_key(value: &str) -> Result<u128, KplError> {
    crate::keys::parse_hash_key(value).map_err(|_| KplError::BadExplicitHashKey {
        value: value.chars().take(48).collect(),
    })
}

//! The one error type of the `kpl` area: every way an aggregated record can be refused on the
//! way in (deaggregation) or a user record on the way out (aggregation).

use thiserror::Error;

/// Why an aggregated record could not be read, or a user record could not be aggregated.
///
/// Nothing in `kpl` panics instead, whatever the bytes. A consumer that gets one of the
/// decoding errors should report the record (its sequence number) and move on: the record's
/// bytes are corrupt, and retrying cannot fix them.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KplError {
    /// The record starts with the KPL magic but is too short to hold the 16-byte MD5 trailer.
    #[error(
        "aggregated record is {len} bytes, shorter than the {min}-byte magic plus MD5 trailer; \
         the record is truncated"
    )]
    Truncated {
        /// Bytes in the record.
        len: usize,
        /// The least an aggregated record can be (4-byte magic + 16-byte MD5).
        min: usize,
    },

    /// The MD5 trailer does not match the protobuf bytes: the record was corrupted or cut.
    #[error(
        "aggregated record's MD5 trailer does not match its body (expected {expected}, found {found})"
    )]
    BadDigest {
        /// MD5 of the body, hex.
        expected: String,
        /// The trailer, hex.
        found: String,
    },

    /// The body between the magic and the MD5 is not a valid `AggregatedRecord` message.
    #[error("aggregated record's body is not a valid KPL protobuf message: {0}")]
    Malformed(#[source] prost::DecodeError),

    /// The record is larger than Kinesis ever delivers (1 MiB), or than the aggregator allows.
    #[error("record is {len} bytes, over the {max}-byte limit")]
    Oversized {
        /// Bytes the record has (or would have).
        len: usize,
        /// The limit.
        max: usize,
    },

    /// A string field of the aggregate (a partition key, an explicit hash key or a tag) is
    /// not UTF-8.
    #[error("aggregated record's {field} holds bytes that are not UTF-8: {source}")]
    NotUtf8 {
        /// Which field: `partition_key_table`, `explicit_hash_key_table` or `tags`.
        field: &'static str,
        /// Where the UTF-8 went wrong.
        #[source]
        source: std::str::Utf8Error,
    },

    /// A valid aggregate with no user records in it.
    #[error("aggregated record holds no user records")]
    NoRecords,

    /// The aggregate has records but an empty partition-key table (every record needs a key).
    #[error("aggregated record has {records} user records but an empty partition-key table")]
    EmptyPartitionKeyTable {
        /// How many records the aggregate holds.
        records: usize,
    },

    /// A user record's partition-key index points past the partition-key table.
    #[error(
        "user record {sub_sequence} uses partition key #{index}, but the table has {table_len}"
    )]
    PartitionKeyIndexOutOfRange {
        /// Position of the user record in the aggregate.
        sub_sequence: u64,
        /// The index it carries.
        index: u64,
        /// Entries in the partition-key table.
        table_len: usize,
    },

    /// A user record's explicit-hash-key index points past the explicit-hash-key table.
    #[error(
        "user record {sub_sequence} uses explicit hash key #{index}, but the table has {table_len}"
    )]
    ExplicitHashKeyIndexOutOfRange {
        /// Position of the user record in the aggregate.
        sub_sequence: u64,
        /// The index it carries.
        index: u64,
        /// Entries in the explicit-hash-key table.
        table_len: usize,
    },

    /// An entry of the partition-key or explicit-hash-key table is longer than Kinesis takes
    /// (256 characters): no producer that Kinesis accepted wrote it, and a consumer that gave
    /// each of its user records a copy would hold the key that many times.
    #[error(
        "aggregated record's {field} entry #{index} is {bytes} bytes, over Kinesis's \
         {max_chars}-character limit"
    )]
    KeyTooLong {
        /// Which table: `partition_key_table` or `explicit_hash_key_table`.
        field: &'static str,
        /// The entry's position in its table.
        index: usize,
        /// Its length in bytes (UTF-8).
        bytes: usize,
        /// The limit in characters ([`super::MAX_PARTITION_KEY_CHARS`], 256).
        max_chars: usize,
    },

    /// A key table has more entries than the aggregate has user records: every entry the KPL
    /// writes is used by at least one record, so the extra ones only cost memory.
    #[error(
        "aggregated record's {field} has {entries} entries for {records} user records; at most \
         one per record"
    )]
    TableTooLong {
        /// Which table: `partition_key_table` or `explicit_hash_key_table`.
        field: &'static str,
        /// Entries in the table.
        entries: usize,
        /// User records in the aggregate.
        records: usize,
    },

    /// A user record lacks a field the KPL's schema marks `required` (its partition-key index
    /// or its data), as the Java protobuf runtime, and so the KCL, would refuse it. This also
    /// bounds the sub-records of an aggregate by its size: each takes at least
    /// [`super::MIN_SUB_RECORD_BYTES`] bytes.
    #[error("user record {sub_sequence} has no {field}, which the KPL's schema requires")]
    MissingField {
        /// Position of the user record in the aggregate.
        sub_sequence: u64,
        /// `partition_key_index` or `data`.
        field: &'static str,
    },

    /// An explicit hash key is not a decimal number in `0..2^128`.
    #[error("explicit hash key `{value}` is not a decimal number below 2^128")]
    BadExplicitHashKey {
        /// The offending value (at most its first 48 characters).
        value: String,
    },

    /// A partition key is empty or longer than Kinesis's 256 Unicode characters.
    #[error("partition key has {chars} characters; Kinesis takes 1 to {max}")]
    BadPartitionKey {
        /// Its length in characters.
        chars: usize,
        /// The limit (256).
        max: usize,
    },

    /// An aggregator was configured with a size limit over Kinesis's 1 MiB record limit, or
    /// too small to hold any record.
    #[error("aggregate size limit {max_bytes} is outside {min}..={max}")]
    BadLimit {
        /// The limit asked for.
        max_bytes: usize,
        /// The smallest usable limit.
        min: usize,
        /// Kinesis's record limit (1 MiB).
        max: usize,
    },
}

//! Deaggregation: one Kinesis record in, its user records out.

use std::ops::RangeInclusive;

use md5::{Digest, Md5};
use prost::Message;

use super::error::KplError;
use super::proto;
use super::{DIGEST_LEN, MAGIC, MAX_RECORD_BYTES, effective_hash_key, parse_explicit_hash_key};

/// A tag carried by a user record inside an aggregate (the KPL writes none).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tag {
    /// Tag name.
    pub key: String,
    /// Tag value, if any.
    pub value: Option<String>,
}

/// One user record: a sub-record of an aggregate, or a plain record passed through.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubRecord {
    /// The partition key the producer gave this user record.
    pub partition_key: String,
    /// Its explicit hash key (decimal), if the producer gave one.
    pub explicit_hash_key: Option<String>,
    /// The user's payload.
    pub data: Vec<u8>,
    /// Position in the aggregate (0 for a plain record). A consumer checkpoints
    /// (sequence number, sub-sequence) so a restart resumes inside an aggregate.
    pub sub_sequence: u64,
    /// Tags, as read.
    pub tags: Vec<Tag>,
}

impl SubRecord {
    /// The hash key Kinesis routes this user record by: its explicit hash key if it has one,
    /// else MD5 of its partition key. `None` if the explicit hash key is not a number < 2^128.
    pub fn hash_key(&self) -> Option<u128> {
        effective_hash_key(&self.partition_key, self.explicit_hash_key.as_deref()).ok()
    }
}

/// What to do with a sub-record whose hash key is outside the shard it was read from.
///
/// That happens when a producer packed records for several shards into one aggregate (the
/// KPL never does; other aggregators may), or when the map changed between prediction and put.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OutOfRange {
    /// Deliver it, and count it in [`Deaggregated::out_of_range`] (the default: nothing lost).
    #[default]
    Deliver,
    /// Drop just that sub-record (counted in [`Deaggregated::dropped`]).
    DropSubRecord,
    /// The KCL's behaviour: drop the whole aggregate — every sub-record, in range or not —
    /// as soon as one is out of range.
    DropAggregate,
}

/// The user records of one Kinesis record, and what the shard check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deaggregated {
    /// The user records delivered, in sub-sequence order.
    pub records: Vec<SubRecord>,
    /// Whether the Kinesis record was a KPL aggregate (else `records` is the one plain record).
    pub aggregated: bool,
    /// Sub-records whose hash key is outside the shard (delivered or not).
    pub out_of_range: u64,
    /// Sub-records not delivered because of [`OutOfRange`].
    pub dropped: u64,
}

/// Deaggregation settings: the shard's hash-key range to check against, and the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deaggregator {
    shard: Option<RangeInclusive<u128>>,
    out_of_range: OutOfRange,
}

impl Deaggregator {
    /// No shard check: every sub-record is delivered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Check sub-records against the hash-key range `start..=end` of the shard they were read
    /// from, applying [`OutOfRange::Deliver`] unless [`Self::out_of_range`] says otherwise.
    pub fn for_shard(start: u128, end: u128) -> Self {
        Self {
            shard: Some(start..=end),
            out_of_range: OutOfRange::Deliver,
        }
    }

    /// Use `policy` for sub-records outside the shard.
    pub fn out_of_range(mut self, policy: OutOfRange) -> Self {
        self.out_of_range = policy;
        self
    }

    /// The user records of the Kinesis record `data`, whose own partition key is
    /// `partition_key` (used only when `data` is not an aggregate).
    ///
    /// A record that does not start with the KPL magic is passed through as one user record.
    /// One that does is checked (size, MD5, protobuf, table indices, explicit hash keys) and
    /// refused with a typed error if any check fails; nothing is delivered from a refused
    /// aggregate, so a retry after a fix cannot duplicate part of it.
    pub fn deaggregate(&self, data: &[u8], partition_key: &str) -> Result<Deaggregated, KplError> {
        let Some(body) = aggregate_body(data)? else {
            return Ok(Deaggregated {
                records: vec![SubRecord {
                    partition_key: partition_key.to_owned(),
                    explicit_hash_key: None,
                    data: data.to_vec(),
                    sub_sequence: 0,
                    tags: Vec::new(),
                }],
                aggregated: false,
                out_of_range: 0,
                dropped: 0,
            });
        };
        let message = proto::AggregatedRecord::decode(body).map_err(KplError::Malformed)?;
        let proto::AggregatedRecord {
            partition_key_table: keys,
            explicit_hash_key_table: hash_keys,
            records,
        } = message;
        if records.is_empty() {
            return Err(KplError::NoRecords);
        }
        if keys.is_empty() {
            return Err(KplError::EmptyPartitionKeyTable {
                records: records.len(),
            });
        }
        // Check every index and hash key before delivering anything.
        let mut out_of_shard = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let sub_sequence = i as u64;
            let pk = table_entry(&keys, r.partition_key_index).ok_or(
                KplError::PartitionKeyIndexOutOfRange {
                    sub_sequence,
                    index: r.partition_key_index,
                    table_len: keys.len(),
                },
            )?;
            let ehk = match r.explicit_hash_key_index {
                None => None,
                Some(index) => Some(table_entry(&hash_keys, index).ok_or(
                    KplError::ExplicitHashKeyIndexOutOfRange {
                        sub_sequence,
                        index,
                        table_len: hash_keys.len(),
                    },
                )?),
            };
            let hash = match ehk {
                Some(e) => parse_explicit_hash_key(e)?,
                None => super::hash_of(pk),
            };
            out_of_shard.push(self.shard.as_ref().is_some_and(|s| !s.contains(&hash)));
        }
        let out_of_range = out_of_shard.iter().filter(|&&o| o).count() as u64;
        let total = records.len() as u64;
        if out_of_range > 0 && self.out_of_range == OutOfRange::DropAggregate {
            return Ok(Deaggregated {
                records: Vec::new(),
                aggregated: true,
                out_of_range,
                dropped: total,
            });
        }
        let drop_out = self.out_of_range == OutOfRange::DropSubRecord;
        let mut out = Vec::with_capacity(records.len());
        for (i, (r, outside)) in records.into_iter().zip(out_of_shard).enumerate() {
            if outside && drop_out {
                continue;
            }
            // Indices were checked above, so both lookups succeed.
            let pk = table_entry(&keys, r.partition_key_index)
                .cloned()
                .unwrap_or_default();
            let ehk = r
                .explicit_hash_key_index
                .and_then(|j| table_entry(&hash_keys, j).cloned());
            out.push(SubRecord {
                partition_key: pk,
                explicit_hash_key: ehk,
                data: r.data,
                sub_sequence: i as u64,
                tags: r
                    .tags
                    .into_iter()
                    .map(|t| Tag {
                        key: t.key,
                        value: t.value,
                    })
                    .collect(),
            });
        }
        let dropped = total - out.len() as u64;
        Ok(Deaggregated {
            records: out,
            aggregated: true,
            out_of_range,
            dropped,
        })
    }
}

/// The user records of `data` (a Kinesis record whose partition key is `partition_key`), with
/// no shard check; see [`Deaggregator::deaggregate`].
pub fn deaggregate(data: &[u8], partition_key: &str) -> Result<Vec<SubRecord>, KplError> {
    Deaggregator::new()
        .deaggregate(data, partition_key)
        .map(|d| d.records)
}

/// Whether `data` starts with the KPL magic (and so is treated as an aggregate).
pub fn is_aggregated(data: &[u8]) -> bool {
    data.starts_with(&MAGIC)
}

/// The protobuf body of an aggregate after the size and MD5 checks; `None` if `data` is not
/// an aggregate.
fn aggregate_body(data: &[u8]) -> Result<Option<&[u8]>, KplError> {
    if !is_aggregated(data) {
        return Ok(None);
    }
    if data.len() > MAX_RECORD_BYTES {
        return Err(KplError::Oversized {
            len: data.len(),
            max: MAX_RECORD_BYTES,
        });
    }
    let min = MAGIC.len() + DIGEST_LEN;
    if data.len() < min {
        return Err(KplError::Truncated {
            len: data.len(),
            min,
        });
    }
    let (body, digest) = data[MAGIC.len()..].split_at(data.len() - min);
    let expected: [u8; DIGEST_LEN] = Md5::digest(body).into();
    if expected != digest {
        return Err(KplError::BadDigest {
            expected: hex(&expected),
            found: hex(digest),
        });
    }
    Ok(Some(body))
}

fn table_entry(table: &[String], index: u64) -> Option<&String> {
    usize::try_from(index).ok().and_then(|i| table.get(i))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

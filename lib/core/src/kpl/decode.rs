//! Deaggregation: one Kinesis record in, its user records out.

use std::ops::RangeInclusive;

use md5::{Digest, Md5};

use super::error::KplError;
use super::wire;
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
    /// `partition_key` (used only when `data` is not an aggregate), as owned values.
    ///
    /// This copies every key and payload; [`Self::deaggregate_ref`] is the same decoding
    /// with the user records borrowed from `data`, for the hot path.
    pub fn deaggregate(&self, data: &[u8], partition_key: &str) -> Result<Deaggregated, KplError> {
        self.deaggregate_ref(data, partition_key)
            .map(|d| d.to_owned_records())
    }

    /// The user records of the Kinesis record `data`, borrowed from it: no key, payload or
    /// per-record allocation (one `Vec` of records per aggregate, and one table of hash keys
    /// when there is a shard to check against).
    ///
    /// A record that does not start with the KPL magic is passed through as one user record.
    /// One that does is checked (size, MD5, protobuf, UTF-8, table indices, explicit hash
    /// keys) and refused with a typed error if any check fails; nothing is delivered from a
    /// refused aggregate, so a retry after a fix cannot duplicate part of it.
    ///
    /// Cost: one MD5 over the aggregate body; with a shard check, one MD5 per distinct
    /// partition key (the table is deduplicated) and one parse per distinct explicit hash key.
    pub fn deaggregate_ref<'a>(
        &self,
        data: &'a [u8],
        partition_key: &'a str,
    ) -> Result<DeaggregatedRef<'a>, KplError> {
        let Some(body) = aggregate_body(data)? else {
            return Ok(DeaggregatedRef {
                records: vec![SubRecordRef {
                    partition_key,
                    explicit_hash_key: None,
                    data,
                    sub_sequence: 0,
                    message: &[],
                    tag_count: 0,
                }],
                aggregated: false,
                out_of_range: 0,
                dropped: 0,
            });
        };
        let wire::RawAggregate {
            keys,
            hash_keys,
            records,
        } = wire::parse(body)?;
        if records.is_empty() {
            return Err(KplError::NoRecords);
        }
        if keys.is_empty() {
            return Err(KplError::EmptyPartitionKeyTable {
                records: records.len(),
            });
        }
        // Hash keys per table entry, computed on first use: a key shared by many records is
        // hashed (MD5) or parsed once.
        let mut key_hashes: Vec<Option<u128>> = match self.shard {
            Some(_) => vec![None; keys.len()],
            None => Vec::new(),
        };
        let mut explicit: Vec<Option<u128>> = vec![None; hash_keys.len()];
        // Check every index and hash key before delivering anything.
        let mut out = Vec::with_capacity(records.len());
        let mut out_of_range = 0u64;
        for (i, r) in records.iter().enumerate() {
            let sub_sequence = i as u64;
            let pk_at = table_index(&keys, r.partition_key_index).ok_or(
                KplError::PartitionKeyIndexOutOfRange {
                    sub_sequence,
                    index: r.partition_key_index,
                    table_len: keys.len(),
                },
            )?;
            let ehk_at = match r.explicit_hash_key_index {
                None => None,
                Some(index) => Some(table_index(&hash_keys, index).ok_or(
                    KplError::ExplicitHashKeyIndexOutOfRange {
                        sub_sequence,
                        index,
                        table_len: hash_keys.len(),
                    },
                )?),
            };
            let ehk_hash = match ehk_at {
                None => None,
                Some(j) => Some(match explicit[j] {
                    Some(h) => h,
                    None => {
                        let h = parse_explicit_hash_key(hash_keys[j])?;
                        explicit[j] = Some(h);
                        h
                    }
                }),
            };
            let outside = match &self.shard {
                None => false,
                Some(s) => {
                    let hash = match ehk_hash {
                        Some(h) => h,
                        None => {
                            *key_hashes[pk_at].get_or_insert_with(|| super::hash_of(keys[pk_at]))
                        }
                    };
                    !s.contains(&hash)
                }
            };
            if outside {
                out_of_range += 1;
                if self.out_of_range != OutOfRange::Deliver {
                    continue;
                }
            }
            out.push(SubRecordRef {
                partition_key: keys[pk_at],
                explicit_hash_key: ehk_at.map(|j| hash_keys[j]),
                data: r.data,
                sub_sequence,
                message: r.message,
                tag_count: r.tag_count,
            });
        }
        let total = records.len() as u64;
        if out_of_range > 0 && self.out_of_range == OutOfRange::DropAggregate {
            out.clear();
        }
        let dropped = total - out.len() as u64;
        Ok(DeaggregatedRef {
            records: out,
            aggregated: true,
            out_of_range,
            dropped,
        })
    }
}

/// One user record borrowed from the Kinesis record it was read from; see
/// [`Deaggregator::deaggregate_ref`]. [`SubRecordRef::to_owned_record`] copies it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubRecordRef<'a> {
    /// The partition key the producer gave this user record.
    pub partition_key: &'a str,
    /// Its explicit hash key (decimal), if the producer gave one.
    pub explicit_hash_key: Option<&'a str>,
    /// The user's payload.
    pub data: &'a [u8],
    /// Position in the aggregate (0 for a plain record). A consumer checkpoints
    /// (sequence number, sub-sequence) so a restart resumes inside an aggregate.
    pub sub_sequence: u64,
    message: &'a [u8],
    tag_count: u32,
}

impl<'a> SubRecordRef<'a> {
    /// The hash key Kinesis routes this user record by: its explicit hash key if it has one,
    /// else MD5 of its partition key. `None` if the explicit hash key is not a number < 2^128.
    pub fn hash_key(&self) -> Option<u128> {
        effective_hash_key(self.partition_key, self.explicit_hash_key).ok()
    }

    /// Whether the user record carries tags (the KPL writes none).
    pub fn has_tags(&self) -> bool {
        self.tag_count > 0
    }

    /// The record's tags as `(key, value)`, in order (walked from the bytes on each call).
    pub fn tags(&self) -> impl Iterator<Item = (&'a str, Option<&'a str>)> + 'a {
        let message = if self.tag_count > 0 {
            self.message
        } else {
            &[]
        };
        wire::tags(message)
    }

    /// An owned copy.
    pub fn to_owned_record(&self) -> SubRecord {
        SubRecord {
            partition_key: self.partition_key.to_owned(),
            explicit_hash_key: self.explicit_hash_key.map(str::to_owned),
            data: self.data.to_vec(),
            sub_sequence: self.sub_sequence,
            tags: self
                .tags()
                .map(|(key, value)| Tag {
                    key: key.to_owned(),
                    value: value.map(str::to_owned),
                })
                .collect(),
        }
    }
}

/// The user records of one Kinesis record, borrowed from it, and what the shard check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeaggregatedRef<'a> {
    /// The user records delivered, in sub-sequence order.
    pub records: Vec<SubRecordRef<'a>>,
    /// Whether the Kinesis record was a KPL aggregate (else `records` is the one plain record).
    pub aggregated: bool,
    /// Sub-records whose hash key is outside the shard (delivered or not).
    pub out_of_range: u64,
    /// Sub-records not delivered because of [`OutOfRange`].
    pub dropped: u64,
}

impl DeaggregatedRef<'_> {
    /// An owned copy of every user record.
    pub fn to_owned_records(&self) -> Deaggregated {
        Deaggregated {
            records: self
                .records
                .iter()
                .map(SubRecordRef::to_owned_record)
                .collect(),
            aggregated: self.aggregated,
            out_of_range: self.out_of_range,
            dropped: self.dropped,
        }
    }
}

/// The user records of `data` (a Kinesis record whose partition key is `partition_key`), with
/// no shard check, as owned values; see [`Deaggregator::deaggregate`].
pub fn deaggregate(data: &[u8], partition_key: &str) -> Result<Vec<SubRecord>, KplError> {
    Deaggregator::new()
        .deaggregate(data, partition_key)
        .map(|d| d.records)
}

/// The user records of `data`, borrowed from it, with no shard check; see
/// [`Deaggregator::deaggregate_ref`].
pub fn deaggregate_ref<'a>(
    data: &'a [u8],
    partition_key: &'a str,
) -> Result<Vec<SubRecordRef<'a>>, KplError> {
    Deaggregator::new()
        .deaggregate_ref(data, partition_key)
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

fn table_index(table: &[&str], index: u64) -> Option<usize> {
    usize::try_from(index).ok().filter(|&i| i < table.len())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

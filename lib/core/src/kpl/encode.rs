//! Aggregation: many user records bound for one shard packed into one Kinesis record.

use std::collections::HashMap;

use md5::{Digest, Md5};
use prost::Message;
use prost::encoding::encoded_len_varint;

use super::error::KplError;
use super::proto;
use super::{
    DEFAULT_MAX_AGGREGATE_BYTES, DIGEST_LEN, MAGIC, MAX_PARTITION_KEY_CHARS, MAX_RECORD_BYTES,
    parse_explicit_hash_key,
};

/// One Kinesis record ready for `PutRecords`: the aggregate (or a lone record, unaggregated).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Aggregate {
    /// The record's partition key: the first user record's.
    pub partition_key: String,
    /// The record's explicit hash key: the first user record's, if it had one.
    pub explicit_hash_key: Option<String>,
    /// The bytes to put: magic, protobuf, MD5 (or the lone user record's data as it was).
    pub data: Vec<u8>,
    /// How many user records it carries.
    pub user_records: usize,
}

impl Aggregate {
    /// Bytes Kinesis counts against its 1 MiB record limit: data plus partition key.
    pub fn billed_bytes(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }
}

/// Packs user records into KPL aggregates of at most `max_bytes` (data plus partition key).
///
/// The encoding is the KPL's, byte for byte: partition keys and explicit hash keys go into
/// their tables in first-use order, each user record lists its partition-key index, then its
/// explicit-hash-key index if it has one, then its data; no tags. The aggregate's own
/// partition key and explicit hash key are those of its first user record, so Kinesis routes
/// it where that record would go. Callers pack only records bound for one shard (the
/// producer does, by predicted shard); the aggregator does not check.
///
/// A lone user record comes out of [`Aggregator::finish`] unaggregated, as the KPL sends it.
#[derive(Debug, Clone)]
pub struct Aggregator {
    max_bytes: usize,
    keys: Vec<String>,
    key_index: HashMap<String, u64>,
    hash_keys: Vec<String>,
    hash_key_index: HashMap<String, u64>,
    records: Vec<proto::Record>,
    /// Encoded length of the protobuf body so far (what `encode` would write).
    body_len: usize,
}

impl Default for Aggregator {
    fn default() -> Self {
        Self::new()
    }
}

impl Aggregator {
    /// An aggregator with the KPL's default limit of 51,200 bytes per aggregate.
    pub fn new() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_AGGREGATE_BYTES,
            keys: Vec::new(),
            key_index: HashMap::new(),
            hash_keys: Vec::new(),
            hash_key_index: HashMap::new(),
            records: Vec::new(),
            body_len: 0,
        }
    }

    /// An aggregator whose aggregates stay within `max_bytes` (data plus partition key), at
    /// most Kinesis's 1 MiB record limit and at least 64 bytes.
    pub fn with_max_bytes(max_bytes: usize) -> Result<Self, KplError> {
        const MIN: usize = 64;
        if !(MIN..=MAX_RECORD_BYTES).contains(&max_bytes) {
            return Err(KplError::BadLimit {
                max_bytes,
                min: MIN,
                max: MAX_RECORD_BYTES,
            });
        }
        Ok(Self {
            max_bytes,
            ..Self::new()
        })
    }

    /// The size limit of this aggregator's aggregates.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// User records added since the last [`Aggregator::finish`].
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing was added since the last [`Aggregator::finish`].
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes the aggregate would bill if finished now (magic, body, MD5 and partition key);
    /// 0 when empty.
    pub fn size_bytes(&self) -> usize {
        match self.keys.first() {
            None => 0,
            Some(first) => MAGIC.len() + self.body_len + DIGEST_LEN + first.len(),
        }
    }

    /// Add a user record if it fits. `Ok(false)`: the aggregate is full, [`finish`] it and add
    /// again. Errors: the partition key or explicit hash key is invalid, or the record alone
    /// is over the limit (it can never be aggregated; send it on its own, if under 1 MiB).
    ///
    /// [`finish`]: Aggregator::finish
    pub fn try_add(
        &mut self,
        partition_key: &str,
        explicit_hash_key: Option<&str>,
        data: &[u8],
    ) -> Result<bool, KplError> {
        check_partition_key(partition_key)?;
        if let Some(ehk) = explicit_hash_key {
            check_explicit_hash_key(ehk)?;
        }
        let alone = Self::new().grow(partition_key, explicit_hash_key, data.len());
        let alone_total = MAGIC.len() + alone + DIGEST_LEN + partition_key.len();
        if alone_total > self.max_bytes {
            return Err(KplError::Oversized {
                len: alone_total,
                max: self.max_bytes,
            });
        }
        let grow = self.grow(partition_key, explicit_hash_key, data.len());
        let outer_key = self.keys.first().map_or(partition_key.len(), String::len);
        let total = MAGIC.len() + self.body_len + grow + DIGEST_LEN + outer_key;
        if total > self.max_bytes {
            return Ok(false);
        }
        let partition_key_index = intern(&mut self.keys, &mut self.key_index, partition_key);
        let explicit_hash_key_index =
            explicit_hash_key.map(|e| intern(&mut self.hash_keys, &mut self.hash_key_index, e));
        self.records.push(proto::Record {
            partition_key_index,
            explicit_hash_key_index,
            data: data.to_vec(),
            tags: Vec::new(),
        });
        self.body_len += grow;
        Ok(true)
    }

    /// The aggregate of everything added so far (`None` if nothing was), and an empty
    /// aggregator ready for the next.
    pub fn finish(&mut self) -> Option<Aggregate> {
        let records = std::mem::take(&mut self.records);
        let keys = std::mem::take(&mut self.keys);
        let hash_keys = std::mem::take(&mut self.hash_keys);
        self.key_index.clear();
        self.hash_key_index.clear();
        self.body_len = 0;
        let first = records.first()?;
        let partition_key = keys
            .get(usize::try_from(first.partition_key_index).ok()?)?
            .clone();
        let explicit_hash_key = first
            .explicit_hash_key_index
            .and_then(|i| hash_keys.get(usize::try_from(i).ok()?).cloned());
        let user_records = records.len();
        if user_records == 1 {
            let data = records.into_iter().next()?.data;
            return Some(Aggregate {
                partition_key,
                explicit_hash_key,
                data,
                user_records,
            });
        }
        let message = proto::AggregatedRecord {
            partition_key_table: keys,
            explicit_hash_key_table: hash_keys,
            records,
        };
        let mut data = Vec::with_capacity(MAGIC.len() + message.encoded_len() + DIGEST_LEN);
        data.extend_from_slice(&MAGIC);
        // Encoding into a Vec cannot run out of room.
        message.encode_raw(&mut data);
        let digest = Md5::digest(&data[MAGIC.len()..]);
        data.extend_from_slice(&digest);
        Some(Aggregate {
            partition_key,
            explicit_hash_key,
            data,
            user_records,
        })
    }

    /// How much the protobuf body grows if this record is added.
    fn grow(&self, partition_key: &str, explicit_hash_key: Option<&str>, data_len: usize) -> usize {
        let mut grow = 0;
        let pk_index = match self.key_index.get(partition_key) {
            Some(&i) => i,
            None => {
                grow += string_field_len(partition_key.len());
                self.keys.len() as u64
            }
        };
        let ehk_index = explicit_hash_key.map(|e| match self.hash_key_index.get(e) {
            Some(&i) => i,
            None => {
                grow += string_field_len(e.len());
                self.hash_keys.len() as u64
            }
        });
        let inner = 1
            + encoded_len_varint(pk_index)
            + ehk_index.map_or(0, |i| 1 + encoded_len_varint(i))
            + string_field_len(data_len);
        grow + string_field_len(inner)
    }
}

/// Length of a length-delimited field with a one-byte tag (field numbers 1..=15).
fn string_field_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

fn intern(table: &mut Vec<String>, index: &mut HashMap<String, u64>, key: &str) -> u64 {
    if let Some(&i) = index.get(key) {
        return i;
    }
    let i = table.len() as u64;
    table.push(key.to_owned());
    index.insert(key.to_owned(), i);
    i
}

/// Kinesis's partition-key rule: 1 to 256 Unicode characters.
pub(crate) fn check_partition_key(partition_key: &str) -> Result<(), KplError> {
    let chars = partition_key.chars().count();
    if chars == 0 || chars > MAX_PARTITION_KEY_CHARS {
        return Err(KplError::BadPartitionKey {
            chars,
            max: MAX_PARTITION_KEY_CHARS,
        });
    }
    Ok(())
}

/// Kinesis's `ExplicitHashKey` rule: `0|([1-9]\d{0,38})` and below 2^128.
pub(crate) fn check_explicit_hash_key(ehk: &str) -> Result<(), KplError> {
    let n = parse_explicit_hash_key(ehk)?;
    if n.to_string() != ehk {
        return Err(KplError::BadExplicitHashKey {
            value: ehk.chars().take(48).collect(),
        });
    }
    Ok(())
}

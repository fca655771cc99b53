//! Deaggregation: one Kinesis record in, its user records out.

use std::ops::RangeInclusive;

use md5::{Digest, Md5};

use super::error::KplError;
use super::wire;
use super::{
    DIGEST_LEN, MAGIC, MAX_PARTITION_KEY_CHARS, MAX_RECORD_BYTES, effective_hash_key,
    parse_explicit_hash_key,
};

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

    /// The user records of the Kinesis record `data`, borrowed from it, collected into a `Vec`
    /// (one [`SubRecordRef`], about 80 bytes, per user record: up to 14 × the record's size for
    /// an aggregate of the smallest sub-records). [`Self::open`] is the same decoding walked
    /// lazily, with nothing allocated per user record.
    ///
    /// A record that does not start with the KPL magic is passed through as one user record.
    /// One that does is checked (size, MD5, protobuf, UTF-8, bounds, table indices, explicit
    /// hash keys) and refused with a typed error if any check fails; nothing is delivered from
    /// a refused aggregate, so a retry after a fix cannot duplicate part of it.
    pub fn deaggregate_ref<'a>(
        &self,
        data: &'a [u8],
        partition_key: &'a str,
    ) -> Result<DeaggregatedRef<'a>, KplError> {
        let opened = self.open(data, partition_key)?;
        Ok(DeaggregatedRef {
            records: opened.iter().collect(),
            aggregated: opened.is_aggregated(),
            out_of_range: opened.out_of_range(),
            dropped: opened.dropped(),
        })
    }

    /// Checks the Kinesis record `data` (whose own partition key is `partition_key`, used only
    /// when `data` is not an aggregate) and returns its user records, to be walked lazily with
    /// [`UserRecords::iter`]: the decoding of [`Self::deaggregate_ref`] without the `Vec`.
    ///
    /// Every check runs here, before the first user record can be read: a refused record
    /// delivers nothing. The bounds, each a typed error ([`KplError`]):
    /// - at most [`MAX_RECORD_BYTES`] (1 MiB) in all, and a matching MD5;
    /// - each table entry at most [`MAX_PARTITION_KEY_CHARS`] (256) characters, Kinesis's rule
    ///   for partition keys ([`KplError::KeyTooLong`]);
    /// - each key table at most as long as the aggregate has user records
    ///   ([`KplError::TableTooLong`]);
    /// - every user record with its `required` partition-key index and data
    ///   ([`KplError::MissingField`]), so an aggregate of `n` bytes holds at most
    ///   `n /` [`MIN_SUB_RECORD_BYTES`](super::MIN_SUB_RECORD_BYTES) user records: 174,762
    ///   in 1 MiB.
    ///
    /// Memory: counted before it is taken. The top-level fields are counted first without
    /// allocating; then each table entry takes at most 49 bytes (its slice, a used flag, its
    /// hash key or explicit hash key), and nothing is allocated per user record. An entry takes
    /// at least 2 bytes of the record and a user record 6, with at most one entry of each table
    /// per user record, so this is at most 10 × the record's size (10 MiB for 1 MiB; 0.3 × for
    /// the KPL's own aggregates), reported by [`UserRecords::heap_bytes`] and freed with it.
    ///
    /// Cost: one MD5 over the aggregate body, two walks over it (three with a shard check),
    /// with a shard check one MD5 per distinct partition key used and one parse per distinct
    /// explicit hash key used.
    pub fn open<'a>(
        &self,
        data: &'a [u8],
        partition_key: &'a str,
    ) -> Result<UserRecords<'a>, KplError> {
        let Some(body) = aggregate_body(data)? else {
            return Ok(UserRecords {
                source: Source::Plain(SubRecordRef {
                    partition_key,
                    explicit_hash_key: None,
                    data,
                    sub_sequence: 0,
                    key_index: 0,
                    message: &[],
                    tag_count: 0,
                }),
                total: 1,
                out_of_range: 0,
                dropped: 0,
            });
        };
        let counts = wire::count(body)?;
        if counts.records == 0 {
            return Err(KplError::NoRecords);
        }
        if counts.keys == 0 {
            return Err(KplError::EmptyPartitionKeyTable {
                records: counts.records,
            });
        }
        for (field, entries) in [
            ("partition_key_table", counts.keys),
            ("explicit_hash_key_table", counts.hash_keys),
        ] {
            if entries > counts.records {
                return Err(KplError::TableTooLong {
                    field,
                    entries,
                    records: counts.records,
                });
            }
        }
        // Which table entries some record uses: only those are hashed or parsed.
        let mut keys_used = vec![false; counts.keys];
        let mut hash_keys_used = vec![false; counts.hash_keys];
        let mut sub_sequence = 0u64;
        let wire::Tables { keys, hash_keys } = wire::walk(body, counts, |r| {
            let at = sub_sequence;
            sub_sequence += 1;
            let missing = |field| KplError::MissingField {
                sub_sequence: at,
                field,
            };
            let index = r
                .partition_key_index
                .ok_or_else(|| missing("partition_key_index"))?;
            if r.data.is_none() {
                return Err(missing("data"));
            }
            let pk =
                table_index(counts.keys, index).ok_or(KplError::PartitionKeyIndexOutOfRange {
                    sub_sequence: at,
                    index,
                    table_len: counts.keys,
                })?;
            keys_used[pk] = true;
            if let Some(index) = r.explicit_hash_key_index {
                let ehk = table_index(counts.hash_keys, index).ok_or(
                    KplError::ExplicitHashKeyIndexOutOfRange {
                        sub_sequence: at,
                        index,
                        table_len: counts.hash_keys,
                    },
                )?;
                hash_keys_used[ehk] = true;
            }
            Ok::<(), KplError>(())
        })?;
        for (field, table) in [
            ("partition_key_table", &keys),
            ("explicit_hash_key_table", &hash_keys),
        ] {
            if let Some((index, entry)) = table.iter().enumerate().find(|(_, e)| too_long(e)) {
                return Err(KplError::KeyTooLong {
                    field,
                    index,
                    bytes: entry.len(),
                    max_chars: MAX_PARTITION_KEY_CHARS,
                });
            }
        }
        let mut explicit = vec![None; hash_keys.len()];
        for (j, used) in hash_keys_used.iter().enumerate() {
            if *used && let Some(entry) = hash_keys.get(j) {
                explicit[j] = Some(parse_explicit_hash_key(entry)?);
            }
        }
        let key_hashes = match self.shard {
            Some(_) => keys
                .iter()
                .zip(&keys_used)
                .map(|(k, used)| used.then(|| super::hash_of(k)))
                .collect(),
            None => Vec::new(),
        };
        let mut checked = Checked {
            body,
            keys,
            hash_keys,
            explicit,
            key_hashes,
            shard: self.shard.clone(),
            policy: self.out_of_range,
            drop_all: false,
        };
        let total = counts.records;
        let out_of_range = match self.shard {
            None => 0,
            Some(_) => wire::records(body).filter(|r| checked.outside(r)).count() as u64,
        };
        let delivered = match self.out_of_range {
            OutOfRange::Deliver => total as u64,
            OutOfRange::DropSubRecord => total as u64 - out_of_range,
            OutOfRange::DropAggregate if out_of_range > 0 => 0,
            OutOfRange::DropAggregate => total as u64,
        };
        checked.drop_all = delivered == 0;
        Ok(UserRecords {
            source: Source::Aggregate(checked),
            total,
            out_of_range,
            dropped: total as u64 - delivered,
        })
    }
}

/// The user records of one Kinesis record, checked by [`Deaggregator::open`] and read lazily:
/// the record's bytes, its two key tables and nothing per user record.
#[derive(Debug, Clone)]
pub struct UserRecords<'a> {
    source: Source<'a>,
    total: usize,
    out_of_range: u64,
    dropped: u64,
}

#[derive(Debug, Clone)]
enum Source<'a> {
    Plain(SubRecordRef<'a>),
    Aggregate(Checked<'a>),
}

/// An aggregate every check passed, with what delivery needs.
#[derive(Debug, Clone)]
struct Checked<'a> {
    body: &'a [u8],
    keys: Vec<&'a str>,
    hash_keys: Vec<&'a str>,
    /// Per explicit-hash-key entry some record uses, its value.
    explicit: Vec<Option<u128>>,
    /// With a shard check, per partition-key entry some record uses, its MD5 hash key.
    key_hashes: Vec<Option<u128>>,
    shard: Option<RangeInclusive<u128>>,
    policy: OutOfRange,
    /// [`OutOfRange::DropAggregate`] applied: nothing is delivered.
    drop_all: bool,
}

impl<'a> Checked<'a> {
    /// Whether `r` routes outside the shard (false with no shard check).
    fn outside(&self, r: &wire::RawRecord<'_>) -> bool {
        let Some(shard) = &self.shard else {
            return false;
        };
        let hash = match r.explicit_hash_key_index {
            Some(j) => usize::try_from(j)
                .ok()
                .and_then(|j| self.explicit.get(j).copied().flatten()),
            None => r
                .partition_key_index
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| self.key_hashes.get(i).copied().flatten()),
        };
        hash.is_some_and(|h| !shard.contains(&h))
    }

    /// The user record `r` at `sub_sequence`, if delivered.
    fn deliver(&self, sub_sequence: u64, r: &wire::RawRecord<'a>) -> Option<SubRecordRef<'a>> {
        if self.drop_all || (self.policy != OutOfRange::Deliver && self.outside(r)) {
            return None;
        }
        let key_index = usize::try_from(r.partition_key_index?).ok()?;
        let explicit_hash_key = match r.explicit_hash_key_index {
            None => None,
            Some(j) => Some(*self.hash_keys.get(usize::try_from(j).ok()?)?),
        };
        Some(SubRecordRef {
            partition_key: self.keys.get(key_index)?,
            explicit_hash_key,
            data: r.data?,
            sub_sequence,
            key_index,
            message: r.message,
            tag_count: r.tag_count,
        })
    }
}

impl<'a> UserRecords<'a> {
    /// The user records delivered, in sub-sequence order, read from the record's bytes as the
    /// iterator advances (each call walks them afresh; nothing is allocated).
    pub fn iter(&self) -> impl Iterator<Item = SubRecordRef<'a>> + '_ {
        let (plain, aggregate) = match &self.source {
            Source::Plain(r) => (Some(*r), None),
            Source::Aggregate(c) => (None, Some(c)),
        };
        let subs = aggregate.into_iter().flat_map(|c| {
            wire::records(c.body)
                .zip(0u64..)
                .filter_map(move |(r, i)| c.deliver(i, &r))
        });
        plain.into_iter().chain(subs)
    }

    /// User records delivered (what [`Self::iter`] yields).
    pub fn len(&self) -> usize {
        usize::try_from(self.total as u64 - self.dropped).unwrap_or(self.total)
    }

    /// Whether nothing is delivered (every sub-record dropped by the [`OutOfRange`] policy).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// User records in the Kinesis record, delivered or not: 1 for a plain record.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether the Kinesis record was a KPL aggregate (else it is the one plain record).
    pub fn is_aggregated(&self) -> bool {
        matches!(self.source, Source::Aggregate(_))
    }

    /// Sub-records whose hash key is outside the shard (delivered or not).
    pub fn out_of_range(&self) -> u64 {
        self.out_of_range
    }

    /// Sub-records not delivered because of [`OutOfRange`].
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Heap bytes this value holds (its tables and their caches; nothing per user record), for
    /// a consumer that counts memory against a budget.
    pub fn heap_bytes(&self) -> usize {
        match &self.source {
            Source::Plain(_) => 0,
            Source::Aggregate(c) => {
                let slice = std::mem::size_of::<&str>();
                let hash = std::mem::size_of::<Option<u128>>();
                (c.keys.capacity() + c.hash_keys.capacity()) * slice
                    + (c.explicit.capacity() + c.key_hashes.capacity()) * hash
            }
        }
    }

    /// The distinct partition keys, in table order; [`SubRecordRef::partition_key_index`]
    /// points into this, so a consumer that keeps records past the input's lifetime can hold
    /// one copy per key instead of one per user record. A plain record's one key is entry 0.
    pub fn partition_keys(&self) -> &[&'a str] {
        match &self.source {
            Source::Plain(r) => std::slice::from_ref(&r.partition_key),
            Source::Aggregate(c) => &c.keys,
        }
    }
}

/// Whether a table entry is over Kinesis's 256-character rule: more than 1,024 bytes can never
/// be 256 characters of UTF-8, so a long entry is refused without counting its characters.
fn too_long(entry: &str) -> bool {
    entry.len() > 4 * MAX_PARTITION_KEY_CHARS || entry.chars().count() > MAX_PARTITION_KEY_CHARS
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
    key_index: usize,
    message: &'a [u8],
    tag_count: u32,
}

impl<'a> SubRecordRef<'a> {
    /// The hash key Kinesis routes this user record by: its explicit hash key if it has one,
    /// else MD5 of its partition key. `None` if the explicit hash key is not a number < 2^128.
    pub fn hash_key(&self) -> Option<u128> {
        effective_hash_key(self.partition_key, self.explicit_hash_key).ok()
    }

    /// The position of this record's partition key in its aggregate's table
    /// ([`UserRecords::partition_keys`]); 0 for a plain record.
    pub fn partition_key_index(&self) -> usize {
        self.key_index
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

fn table_index(table_len: usize, index: u64) -> Option<usize> {
    usize::try_from(index).ok().filter(|&i| i < table_len)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

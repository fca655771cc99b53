//! Where a counter lives in the counters table: its partition key and its sub-keys' sort keys.

use std::fmt;
use std::str::FromStr;

use super::CounterError;

/// DynamoDB's limit on a partition key value, in bytes.
const MAX_PK_BYTES: usize = 2048;
/// DynamoDB's limit on a sort key value, in bytes.
const MAX_SK_BYTES: usize = 1024;

/// One logical counter (`likes` of post `p9`), stored in partition `pk = "<name>#<key>"`.
///
/// The name may not contain `#`, so the partition key splits back at its first `#`; the key may.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CounterKey {
    name: String,
    key: String,
}

impl CounterKey {
    /// Names a counter; the name is non-empty without `#`, the key non-empty, the pk ≤ 2048 bytes.
    pub fn new(name: impl Into<String>, key: impl Into<String>) -> Result<Self, CounterError> {
        let (name, key) = (name.into(), key.into());
        let invalid = |reason| CounterError::InvalidCounterKey {
            pk: format!("{name}#{key}"),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("the counter name is empty"));
        }
        if name.contains('#') {
            return Err(invalid("the counter name contains '#'"));
        }
        if key.is_empty() {
            return Err(invalid("the key is empty"));
        }
        if name.len() + 1 + key.len() > MAX_PK_BYTES {
            return Err(invalid("the partition key is longer than 2048 bytes"));
        }
        Ok(Self { name, key })
    }

    /// Splits a partition key `<name>#<key>` read back from the table.
    pub fn parse_pk(pk: &str) -> Result<Self, CounterError> {
        let (name, key) = pk
            .split_once('#')
            .ok_or_else(|| CounterError::InvalidCounterKey {
                pk: pk.to_owned(),
                reason: "no '#' between the counter name and the key",
            })?;
        Self::new(name, key)
    }

    /// The counter's name (`likes`), shared by every key counted the same way.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counted entity (`p9`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The partition key in the counters table: `<name>#<key>`.
    pub fn pk(&self) -> String {
        format!("{}#{}", self.name, self.key)
    }
}

impl fmt::Display for CounterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.name, self.key)
    }
}

/// Who flushes a writer sub-key: a stream shard id (stream writers) or a router id (processes).
///
/// Exactly one writer at a time may flush a given id; its seqs must increase (see
/// [`decide`](super::decide)). Non-empty, at most 1022 bytes (`w#` + id fits a 1024-byte sort
/// key), no control characters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriterId(String);

impl WriterId {
    /// Validates a writer id such as `shardId-000000000003` or `router-7`.
    pub fn new(id: impl Into<String>) -> Result<Self, CounterError> {
        let id = id.into();
        let invalid = |reason| CounterError::InvalidWriterId {
            id: id.clone(),
            reason,
        };
        if id.is_empty() {
            return Err(invalid("it is empty"));
        }
        if id.len() + 2 > MAX_SK_BYTES {
            return Err(invalid("it is longer than 1022 bytes"));
        }
        if id.chars().any(char::is_control) {
            return Err(invalid("it contains a control character"));
        }
        Ok(Self(id))
    }

    /// The id as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WriterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One item of a counter's partition, named by its sort key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SubKey {
    /// `w#<writer>`: one writer's absolute total and seq, written conditionally.
    Writer(WriterId),
    /// `s#<n>`: salted sub-key n, updated additively (naive and salted strategies).
    Salt(u32),
    /// `fix`: the rebuild job's correction, so a read equals the recount.
    Fix,
    /// `settled`: the folded totals of closed writers (see [`compact`](super::compact)), so a
    /// read stays bounded while stream shards keep rolling over.
    Settled,
}

impl SubKey {
    /// The sort key of this item: `w#<writer>`, `s#<n>`, `fix` or `settled`.
    pub fn sort_key(&self) -> String {
        match self {
            Self::Writer(writer) => format!("w#{writer}"),
            Self::Salt(n) => format!("s#{n}"),
            Self::Fix => "fix".to_owned(),
            Self::Settled => "settled".to_owned(),
        }
    }

    /// Parses a sort key read back from the table; any other shape is an error, never a guess.
    pub fn parse(sk: &str) -> Result<Self, CounterError> {
        let unknown = || CounterError::UnknownSortKey(sk.to_owned());
        if sk == "fix" {
            return Ok(Self::Fix);
        }
        if sk == "settled" {
            return Ok(Self::Settled);
        }
        if let Some(writer) = sk.strip_prefix("w#") {
            return WriterId::new(writer)
                .map(Self::Writer)
                .map_err(|_| unknown());
        }
        if let Some(n) = sk.strip_prefix("s#") {
            // Canonical decimal only, so one salt has exactly one sort key.
            let canonical = !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'));
            if canonical {
                return n.parse().map(Self::Salt).map_err(|_| unknown());
            }
        }
        Err(unknown())
    }
}

impl FromStr for SubKey {
    type Err = CounterError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for SubKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sort_key())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_counter_lives_in_partition_name_hash_key() {
        let p9 = CounterKey::new("likes", "p9").unwrap();
        assert_eq!(p9.pk(), "likes#p9");
        assert_eq!(CounterKey::parse_pk("likes#p9").unwrap(), p9);
        // The key may contain '#': only the name is split off.
        let nested = CounterKey::parse_pk("likes#tenant#p9").unwrap();
        assert_eq!((nested.name(), nested.key()), ("likes", "tenant#p9"));
    }

    #[test]
    fn a_malformed_counter_key_is_a_typed_error() {
        for (name, key) in [("", "p9"), ("li#kes", "p9"), ("likes", "")] {
            assert!(matches!(
                CounterKey::new(name, key),
                Err(CounterError::InvalidCounterKey { .. })
            ));
        }
        assert!(CounterKey::parse_pk("likes").is_err());
        assert!(CounterKey::new("likes", "x".repeat(2048)).is_err());
    }

    #[test]
    fn sort_keys_have_four_shapes() {
        let shard = WriterId::new("shardId-000000000003").unwrap();
        assert_eq!(
            SubKey::Writer(shard.clone()).sort_key(),
            "w#shardId-000000000003"
        );
        assert_eq!(SubKey::Salt(7).sort_key(), "s#7");
        assert_eq!(SubKey::Fix.sort_key(), "fix");
        assert_eq!(SubKey::Settled.sort_key(), "settled");
        assert_eq!(SubKey::parse("settled").unwrap(), SubKey::Settled);
        assert_eq!(
            SubKey::parse("w#shardId-000000000003").unwrap(),
            SubKey::Writer(shard)
        );
        assert_eq!(SubKey::parse("s#0").unwrap(), SubKey::Salt(0));
    }

    #[test]
    fn an_unknown_sort_key_is_rejected_not_guessed() {
        for sk in [
            "",
            "w#",
            "s#",
            "s#01",
            "s#-1",
            "s#x",
            "s#4294967296",
            "fixx",
            "FIX",
            "settle",
            "settled#1",
            "x#1",
            "w",
            "w#a\nb",
        ] {
            assert_eq!(
                SubKey::parse(sk),
                Err(CounterError::UnknownSortKey(sk.to_owned())),
                "{sk:?}"
            );
        }
    }

    #[test]
    fn a_malformed_writer_id_is_a_typed_error() {
        assert!(WriterId::new("").is_err());
        assert!(WriterId::new("a\tb").is_err());
        assert!(WriterId::new("x".repeat(1023)).is_err());
        assert!(WriterId::new("x".repeat(1022)).is_ok());
    }

    proptest! {
        #[test]
        fn every_sub_key_round_trips_through_its_sort_key(
            writer in "[ -~]{1,40}",
            salt: u32,
        ) {
            for sub in [SubKey::Writer(WriterId::new(writer.clone()).unwrap()), SubKey::Salt(salt), SubKey::Fix, SubKey::Settled] {
                prop_assert_eq!(SubKey::parse(&sub.sort_key()).unwrap(), sub);
            }
        }

        #[test]
        fn every_counter_key_round_trips_through_its_pk(name in "[a-z_]{1,12}", key in "[ -~]{1,40}") {
            let counter = CounterKey::new(name, key).unwrap();
            prop_assert_eq!(CounterKey::parse_pk(&counter.pk()).unwrap(), counter);
        }
    }
}

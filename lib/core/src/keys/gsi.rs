//! GSI write sharding: a hot index partition key split into N index shards by a calculated
//! suffix of the item id, read back by querying all N and merging.

use super::error::KeyError;
use super::hash::CalculatedSuffix;
use super::salt::{SaltedKey, sub_key_name};

/// An index partition key `prefix` split into N shards `prefix#0..prefix#N-1` (N = 1: `prefix`).
///
/// An item goes to shard `n` = [`stable_hash64`](crate::keys::stable_hash64)`(item id) mod N`, so
/// every write about one item lands on one index key, and `all_shards` lists what a reader
/// queries in parallel (e.g. a creator's index key `nova` as `nova#0..nova#7`; see
/// docs/write-sharding.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GsiShard {
    key: SaltedKey,
    suffix: CalculatedSuffix,
}

impl GsiShard {
    /// Shard index key `prefix` into `shards` index shards (`1..=MAX_SALTS`).
    pub fn new(prefix: impl Into<String>, shards: u16) -> Result<Self, KeyError> {
        let key = SaltedKey::new(prefix, shards)?;
        let suffix = CalculatedSuffix::new(shards)?;
        Ok(Self { key, suffix })
    }

    /// The unsharded index key, e.g. the creator id.
    pub fn prefix(&self) -> &str {
        self.key.key()
    }

    /// The number of index shards N.
    pub fn shards(&self) -> u16 {
        self.key.salts()
    }

    /// The index shard number (`0..N`) of the item with id `item_id`.
    pub fn shard_of(&self, item_id: &[u8]) -> u16 {
        self.suffix.suffix(item_id)
    }

    /// The index partition key to write on the item with id `item_id`.
    pub fn key_for(&self, item_id: &[u8]) -> String {
        sub_key_name(
            self.key.key(),
            u32::from(self.shard_of(item_id)),
            self.key.salts(),
        )
    }

    /// Every index partition key, `prefix#0..prefix#N-1`: what a scatter read queries.
    pub fn all_shards(&self) -> Vec<String> {
        self.key.sub_keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::MAX_SALTS;
    use proptest::prelude::*;

    #[test]
    fn a_creators_index_key_is_split_into_n_shards() {
        let g = GsiShard::new("nova", 8).unwrap();
        assert_eq!(
            g.all_shards(),
            (0..8).map(|n| format!("nova#{n}")).collect::<Vec<_>>()
        );
        // stable_hash64("nova-post-1") mod 8 = 0 (Python: md5 first 8 bytes, big-endian).
        assert_eq!(g.key_for(b"nova-post-1"), "nova#0");
        // … and of "user-42" mod 8 = 5.
        assert_eq!(g.key_for(b"user-42"), "nova#5");
    }

    #[test]
    fn one_index_shard_is_the_plain_index_key() {
        let g = GsiShard::new("nova", 1).unwrap();
        assert_eq!(g.all_shards(), vec!["nova"]);
        assert_eq!(g.key_for(b"anything"), "nova");
    }

    #[test]
    fn bad_index_keys_are_refused() {
        assert_eq!(GsiShard::new("", 8), Err(KeyError::EmptyKey));
        assert_eq!(GsiShard::new("nova", 0), Err(KeyError::ZeroSalts));
        assert!(GsiShard::new("CREATOR#7", 8).is_err());
    }

    proptest! {
        #[test]
        fn every_item_lands_on_one_listed_index_shard(
            prefix in "[a-z]{1,8}(#[A-Z]{1,3})?",
            shards in 1u16..=MAX_SALTS,
            item in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let g = GsiShard::new(prefix, shards).unwrap();
            let all = g.all_shards();
            prop_assert_eq!(all.len(), usize::from(shards));
            let key = g.key_for(&item);
            prop_assert_eq!(&all[usize::from(g.shard_of(&item))], &key);
        }
    }
}

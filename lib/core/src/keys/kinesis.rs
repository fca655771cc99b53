//! Where Kinesis puts a partition key: MD5 of the key as a 128-bit hash key, and the open shard
//! whose inclusive hash-key range contains it.

use md5::{Digest, Md5};

use super::error::KeyError;

/// The Kinesis hash key of `partition_key`: MD5 of its UTF-8 bytes as a big-endian `u128`.
pub fn kinesis_hash_key(partition_key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// One open shard and its inclusive hash-key range, as `ListShards` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShardRange {
    /// The shard id, e.g. `shardId-000000000003`.
    pub shard_id: String,
    /// The first hash key the shard owns (`StartingHashKey`).
    pub start: u128,
    /// The last hash key the shard owns, inclusive (`EndingHashKey`).
    pub end: u128,
}

impl ShardRange {
    /// A shard owning `start..=end`.
    pub fn new(shard_id: impl Into<String>, start: u128, end: u128) -> Self {
        Self {
            shard_id: shard_id.into(),
            start,
            end,
        }
    }

    /// A shard from the decimal strings Kinesis returns (`HashKeyRange`).
    pub fn from_decimal(
        shard_id: impl Into<String>,
        start: &str,
        end: &str,
    ) -> Result<Self, KeyError> {
        Ok(Self::new(
            shard_id,
            parse_hash_key(start)?,
            parse_hash_key(end)?,
        ))
    }

    /// `n` shards splitting the hash-key space evenly, as `CreateStream` with `n` shards does.
    ///
    /// Shard `i` starts at ⌊i·2^128/n⌋ and is named `shardId-{i:012}`.
    pub fn even_split(n: usize) -> Result<Vec<Self>, KeyError> {
        if n == 0 {
            return Err(KeyError::NoShards);
        }
        let starts: Vec<u128> = (0..n).map(|i| split_point(i, n)).collect();
        Ok(starts
            .iter()
            .enumerate()
            .map(|(i, &start)| {
                let end = starts
                    .get(i + 1)
                    .map_or(u128::MAX, |next| next.saturating_sub(1));
                Self::new(format!("shardId-{i:012}"), start, end)
            })
            .collect())
    }

    /// Whether `hash_key` is in this shard's range.
    pub fn contains(&self, hash_key: u128) -> bool {
        self.start <= hash_key && hash_key <= self.end
    }
}

/// ⌊i·2^128/n⌋ without overflow, for `i < n`.
fn split_point(i: usize, n: usize) -> u128 {
    if i == 0 {
        return 0;
    }
    // From here n ≥ 2, so q + 1 below cannot overflow.
    let n128 = n as u128;
    // 2^128 = n·q + r with 0 ≤ r < n.
    let (mut q, mut r) = (u128::MAX / n128, u128::MAX % n128 + 1);
    if r == n128 {
        q += 1;
        r = 0;
    }
    let i128 = i as u128;
    // i·2^128/n = i·q + i·r/n; i·r < n² fits for any realistic n (n < 2^64).
    i128 * q + (i128 * r) / n128
}

/// Parse a decimal hash key (`0..=2^128-1`).
pub fn parse_hash_key(text: &str) -> Result<u128, KeyError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(KeyError::BadHashKey {
            value: text.to_owned(),
        });
    }
    text.parse::<u128>().map_err(|_| KeyError::BadHashKey {
        value: text.to_owned(),
    })
}

/// Check that `shards` are sorted by start, do not overlap, and cover `0..=2^128-1` exactly.
pub fn validate_shards(shards: &[ShardRange]) -> Result<(), KeyError> {
    let (first, rest) = shards.split_first().ok_or(KeyError::NoShards)?;
    for s in shards {
        if s.start > s.end {
            return Err(KeyError::ShardRangeInverted {
                shard_id: s.shard_id.clone(),
            });
        }
    }
    if let Some(w) = shards.windows(2).find(|w| w[1].start < w[0].start) {
        return Err(KeyError::ShardRangesUnsorted {
            shard_id: w[1].shard_id.clone(),
        });
    }
    if first.start != 0 {
        return Err(KeyError::ShardRangesGap {
            from: 0,
            to: first.start - 1,
        });
    }
    let mut prev = first;
    for s in rest {
        if s.start <= prev.end {
            return Err(KeyError::ShardRangesOverlap {
                first: prev.shard_id.clone(),
                second: s.shard_id.clone(),
            });
        }
        // prev.end < s.start, so prev.end + 1 cannot overflow.
        if s.start != prev.end + 1 {
            return Err(KeyError::ShardRangesGap {
                from: prev.end + 1,
                to: s.start - 1,
            });
        }
        prev = s;
    }
    if prev.end != u128::MAX {
        return Err(KeyError::ShardRangesGap {
            from: prev.end + 1,
            to: u128::MAX,
        });
    }
    Ok(())
}

/// Index of the shard whose range contains `hash_key` (binary search; `shards` sorted by start,
/// as [`validate_shards`] checks); `None` if no listed shard contains it.
pub fn shard_for(hash_key: u128, shards: &[ShardRange]) -> Option<usize> {
    let after = shards.partition_point(|s| s.start <= hash_key);
    let i = after.checked_sub(1)?;
    shards.get(i).filter(|s| s.contains(hash_key)).map(|_| i)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // Expected values from Python 3: int.from_bytes(hashlib.md5(s.encode()).digest(), "big").
    #[test]
    fn the_hash_key_is_md5_as_a_big_endian_integer() {
        assert_eq!(
            kinesis_hash_key(""),
            0xd41d_8cd9_8f00_b204_e980_0998_ecf8_427e
        );
        assert_eq!(
            kinesis_hash_key("p9"),
            289_324_316_144_189_039_582_144_540_429_744_379_648
        );
        assert_eq!(
            kinesis_hash_key("likes#p9"),
            71_089_568_160_398_496_466_555_030_044_276_984_640
        );
        assert_eq!(
            kinesis_hash_key("p9#3"),
            329_390_909_233_170_241_917_940_933_578_315_844_107
        );
    }

    #[test]
    fn an_even_split_matches_what_kinesis_creates() {
        // CreateStream with 2 shards: 0..2^127-1 and 2^127..2^128-1.
        let two = ShardRange::even_split(2).unwrap();
        assert_eq!(two[0].end, (1u128 << 127) - 1);
        assert_eq!(two[1].start, 1u128 << 127);
        // With 3 shards the first ends at 113427455640312821154458202477256070484.
        let three = ShardRange::even_split(3).unwrap();
        assert_eq!(
            three[0].end,
            113_427_455_640_312_821_154_458_202_477_256_070_484
        );
        assert_eq!(three[2].shard_id, "shardId-000000000002");
        assert_eq!(ShardRange::even_split(0), Err(KeyError::NoShards));
    }

    #[test]
    fn shard_ranges_parse_from_kinesis_decimal_strings() {
        let s = ShardRange::from_decimal(
            "shardId-000000000000",
            "0",
            "340282366920938463463374607431768211455",
        )
        .unwrap();
        assert_eq!(s.end, u128::MAX);
        assert!(
            ShardRange::from_decimal("s", "0", "340282366920938463463374607431768211456").is_err()
        );
        assert!(ShardRange::from_decimal("s", "-1", "5").is_err());
        assert!(ShardRange::from_decimal("s", "+1", "5").is_err());
        assert!(ShardRange::from_decimal("s", "", "5").is_err());
    }

    #[test]
    fn broken_shard_maps_are_refused_with_the_reason() {
        let ok = ShardRange::even_split(4).unwrap();
        assert_eq!(validate_shards(&ok), Ok(()));
        assert_eq!(validate_shards(&[]), Err(KeyError::NoShards));

        let mut gap = ok.clone();
        gap[2].start += 1;
        assert!(matches!(
            validate_shards(&gap),
            Err(KeyError::ShardRangesGap { .. })
        ));

        let mut overlap = ok.clone();
        overlap[1].end += 1;
        assert!(matches!(
            validate_shards(&overlap),
            Err(KeyError::ShardRangesOverlap { .. })
        ));

        let mut unsorted = ok.clone();
        unsorted.swap(1, 2);
        assert!(matches!(
            validate_shards(&unsorted),
            Err(KeyError::ShardRangesUnsorted { .. })
        ));

        let mut short = ok.clone();
        short.pop();
        assert!(matches!(
            validate_shards(&short),
            Err(KeyError::ShardRangesGap { to: u128::MAX, .. })
        ));

        let inverted = vec![ShardRange::new("s", u128::MAX, 0)];
        assert!(matches!(
            validate_shards(&inverted),
            Err(KeyError::ShardRangeInverted { .. })
        ));
    }

    /// A valid shard map cut at the given points (each cut starts a new shard).
    pub(crate) fn cut_map(cuts: &std::collections::BTreeSet<u128>) -> Vec<ShardRange> {
        let starts: Vec<u128> = std::iter::once(0).chain(cuts.iter().copied()).collect();
        starts
            .iter()
            .enumerate()
            .map(|(i, &start)| {
                let end = starts.get(i + 1).map_or(u128::MAX, |n| n - 1);
                ShardRange::new(format!("shardId-{i:012}"), start, end)
            })
            .collect()
    }

    pub(crate) fn any_shard_map() -> impl Strategy<Value = Vec<ShardRange>> {
        prop_oneof![
            (1usize..=16).prop_map(|n| ShardRange::even_split(n).unwrap()),
            proptest::collection::btree_set(1u128..=u128::MAX, 0..12).prop_map(|c| cut_map(&c)),
        ]
    }

    proptest! {
        #[test]
        fn every_hash_key_belongs_to_exactly_the_shard_that_contains_it(
            shards in any_shard_map(), hash in any::<u128>()
        ) {
            prop_assert_eq!(validate_shards(&shards), Ok(()));
            let i = shard_for(hash, &shards).unwrap();
            prop_assert!(shards[i].contains(hash));
            prop_assert_eq!(shards.iter().filter(|s| s.contains(hash)).count(), 1);
        }

        #[test]
        fn a_shard_map_with_a_moved_boundary_is_refused(
            shards in any_shard_map(), which in any::<prop::sample::Index>(), up in any::<bool>()
        ) {
            prop_assume!(shards.len() >= 2);
            let mut broken = shards.clone();
            let i = which.index(broken.len() - 1);
            // Move the boundary between shard i and i+1 on one side only.
            if up {
                broken[i].end = broken[i].end.saturating_add(1);
            } else {
                broken[i + 1].start = broken[i + 1].start.saturating_add(1);
            }
            prop_assume!(broken != shards);
            prop_assert!(validate_shards(&broken).is_err());
        }

        #[test]
        fn every_even_split_is_a_valid_map_of_near_equal_shards(n in 1usize..=4096) {
            let shards = ShardRange::even_split(n).unwrap();
            prop_assert_eq!(validate_shards(&shards), Ok(()));
            let widths: Vec<u128> = shards.iter().map(|s| s.end - s.start).collect();
            let (min, max) = (widths.iter().min().unwrap(), widths.iter().max().unwrap());
            prop_assert!(max - min <= 1);
        }
    }
}

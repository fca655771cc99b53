//! Key → slot: CRC16/XMODEM of the key's hash tag, mod 16,384 (the Redis Cluster function).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::SlotError;

/// How many slots there are. Fixed forever: keys never change slot, only slots change owner.
pub const SLOTS: u16 = 16_384;

/// The highest slot number.
pub const LAST_SLOT: u16 = SLOTS - 1;

const XMODEM: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The part of `key` that is hashed: the text inside the first `{…}` when it is non-empty,
/// otherwise the whole key. `post:{p9}` and `likes:{p9}:r0` both hash `p9`, so they share a
/// slot (and so an owner) on purpose.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The slot of `key`: CRC16/XMODEM of its [`hash_tag`], mod [`SLOTS`].
pub fn slot_of(key: &str) -> u16 {
    XMODEM.checksum(hash_tag(key).as_bytes()) % SLOTS
}

/// An inclusive range of slots, `first..=last` (printed and parsed as `first-last`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SlotRange {
    /// The first slot in the range.
    pub first: u16,
    /// The last slot in the range (inclusive).
    pub last: u16,
}

impl SlotRange {
    /// `first..=last`; refuses an empty or out-of-range span.
    pub fn new(first: u16, last: u16) -> Result<Self, SlotError> {
        if first > last || last > LAST_SLOT {
            return Err(SlotError::BadRange { first, last });
        }
        Ok(Self { first, last })
    }

    /// Every slot, `0-16383`.
    pub const ALL: SlotRange = SlotRange {
        first: 0,
        last: LAST_SLOT,
    };

    /// One slot.
    pub fn single(slot: u16) -> Result<Self, SlotError> {
        Self::new(slot, slot)
    }

    /// Whether `slot` lies in the range.
    pub fn contains(&self, slot: u16) -> bool {
        (self.first..=self.last).contains(&slot)
    }

    /// Whether every slot of `other` lies in this range.
    pub fn covers(&self, other: &SlotRange) -> bool {
        self.first <= other.first && other.last <= self.last
    }

    /// Whether the two ranges share a slot.
    pub fn overlaps(&self, other: &SlotRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// How many slots the range holds.
    pub fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// Always false: a range holds at least one slot (present for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for SlotRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl FromStr for SlotRange {
    type Err = SlotError;

    /// `A-B`, or a single slot `A`.
    fn from_str(text: &str) -> Result<Self, SlotError> {
        let bad = || SlotError::Parse(text.to_owned());
        let (a, b) = match text.trim().split_once('-') {
            Some((a, b)) => (a, b),
            None => (text.trim(), text.trim()),
        };
        let first: u16 = a.trim().parse().map_err(|_| bad())?;
        let last: u16 = b.trim().parse().map_err(|_| bad())?;
        Self::new(first, last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn crc16_xmodem_matches_the_redis_cluster_reference_vector() {
        // The Redis Cluster specification's reference: CRC16("123456789") = 0x31C3.
        assert_eq!(XMODEM.checksum(b"123456789"), 0x31C3);
        assert_eq!(slot_of("123456789"), 0x31C3 % SLOTS);
    }

    #[test]
    fn slots_match_redis_cluster_keyslot_answers() {
        // CLUSTER KEYSLOT answers of Redis / Valkey for these keys.
        for (key, slot) in [
            ("foo", 12_182),
            ("bar", 5_061),
            ("hello", 866),
            ("somekey", 11_058),
            ("{user1000}.following", 3_443),
            ("{user1000}.followers", 3_443),
            ("foo{}{bar}", 8_363),
            ("foo{{bar}}zap", 4_015),
            ("foo{bar}{zap}", 5_061),
            ("", 0),
            ("post:{p9}", 12_067),
        ] {
            assert_eq!(slot_of(key), slot, "{key:?}");
        }
    }

    #[test]
    fn the_hash_tag_is_the_first_non_empty_braces() {
        assert_eq!(hash_tag("post:{p9}"), "p9");
        assert_eq!(hash_tag("likes:{p9}:r0"), "p9");
        assert_eq!(hash_tag("foo{}{bar}"), "foo{}{bar}");
        assert_eq!(hash_tag("foo{{bar}}zap"), "{bar");
        assert_eq!(hash_tag("foo{bar}{zap}"), "bar");
        assert_eq!(hash_tag("no-tag"), "no-tag");
        assert_eq!(hash_tag("open{only"), "open{only");
        assert_eq!(slot_of("post:{p9}"), slot_of("comments:{p9}"));
    }

    #[test]
    fn ranges_parse_and_refuse_bad_text() {
        assert_eq!(
            "10-20".parse::<SlotRange>().ok(),
            SlotRange::new(10, 20).ok()
        );
        assert_eq!("7".parse::<SlotRange>().ok(), SlotRange::new(7, 7).ok());
        for bad in ["20-10", "0-16384", "a-b", "-", "1-2-3"] {
            assert!(bad.parse::<SlotRange>().is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn every_key_has_a_slot_and_tagged_keys_share_it(tag in "[a-z0-9]{1,12}", a in "[a-z:]{0,8}", b in "[a-z:]{0,8}") {
            let k1 = format!("{a}{{{tag}}}{b}");
            let k2 = format!("{b}{{{tag}}}x");
            prop_assert!(slot_of(&k1) < SLOTS);
            prop_assert_eq!(slot_of(&k1), slot_of(&k2));
            prop_assert_eq!(slot_of(&k1), slot_of(&tag));
        }
    }
}

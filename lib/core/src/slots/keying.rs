//! How a key becomes a slot: a directory's **keying**, chosen once at `slots init`.
//!
//! - [`Keying::Hash`] (the default): CRC16 of the key's [`hash_tag`], mod 16,384. Keys spread
//!   evenly whatever their shape; a tenant stays together (its tag), but neighbouring keys land
//!   anywhere.
//! - [`Keying::Ordered`]: the slot is the key's own **order** — its [`hash_tag`] read as a
//!   fraction of the key space in a declared alphabet, scaled to 16,384 slots. Keys that sort
//!   together land in the same or adjacent slots, so a slot range is an *interval* of keys:
//!   geo cells (geohash `u4pru`), tenant ids, time buckets whose varying part leads the tag
//!   (`{22:15}`, the hour and minute of the day). The
//!   load planners then give a dense interval (a city at rush hour, the newest bucket) a
//!   narrow range of its own and a sparse one a wide range: ranges equal in load, not in key
//!   space.
//!
//! Everything built on slots works unchanged in both: routers, the mover, attrition moves,
//! verify and the balance plan see slot ranges, and a slot range of an ordered directory is a
//! key interval.
//!
//! ```
//! use heatsink_core::slots::Keying;
//!
//! // Geohash cells, in the geohash alphabet: 32 symbols, 512 slots per first symbol.
//! let geo = Keying::ordered("0123456789bcdefghjkmnpqrstuvwxyz")?;
//! assert!(geo.slot_of("9q8yy") < geo.slot_of("9qb00")); // order is kept
//! assert_eq!(geo.slot_of("9q8yy"), geo.slot_of("9q9p1")); // one slot: two 3-symbol cells
//! assert_eq!(geo.slot_of("00000"), 0);
//! assert_eq!(geo.slot_of("zzzzz"), 16_383);
//! # Ok::<(), heatsink_core::slots::SlotError>(())
//! ```
//!
//! Guarantees: for any two keys, `k1 <= k2` (byte order of their tags) implies
//! `slot_of(k1) <= slot_of(k2)` (property-tested), including symbols outside the alphabet: such
//! a symbol takes the place of its rank among the alphabet's symbols and ends the key.
//! Limits: the grain is 1/16,384 of the key space — in a 32-symbol alphabet, 2.8 symbols (one
//! slot holds two 3-symbol geohash cells, about 156 × 156 km each at the equator); keys that
//! share a longer prefix (`2026-12-06T…`) share a slot, so lead the tag with what varies. One
//! slot hotter than an owner can serve is a hot key, for salting, not for a move. At most 256
//! symbols.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::SlotError;
use super::slot::{LAST_SLOT, SLOTS, hash_tag, slot_of};

/// How a directory turns a key into a slot (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Keying {
    /// CRC16/XMODEM of the key's hash tag, mod 16,384 ([`slot_of`]).
    #[default]
    Hash,
    /// The key's hash tag read as a fraction of the key space in `alphabet` (its symbols in
    /// ascending byte order; empty: every byte, 0 to 255).
    Ordered {
        /// The symbols, sorted, distinct (empty: every byte).
        alphabet: Vec<u8>,
    },
}

/// Digits read at most: enough that `radix^n` stays under 2^100 for the finest grain.
const PRECISION: u128 = 1 << 100;

impl Keying {
    /// Ordered keying over `alphabet` (its symbols in any order; duplicates ignored; empty
    /// means every byte). Refuses a non-ASCII alphabet or one of a single symbol.
    pub fn ordered(alphabet: &str) -> Result<Self, SlotError> {
        if !alphabet.is_ascii() {
            return Err(SlotError::Keying(format!(
                "alphabet {alphabet:?} is not ASCII"
            )));
        }
        let mut symbols: Vec<u8> = alphabet.bytes().collect();
        symbols.sort_unstable();
        symbols.dedup();
        if symbols.len() == 1 {
            return Err(SlotError::Keying(format!(
                "alphabet {alphabet:?} has one symbol: it orders nothing"
            )));
        }
        Ok(Self::Ordered { alphabet: symbols })
    }

    /// The slot of `key` under this keying.
    pub fn slot_of(&self, key: &str) -> u16 {
        match self {
            Keying::Hash => slot_of(key),
            Keying::Ordered { alphabet } => ordered_slot(hash_tag(key).as_bytes(), alphabet),
        }
    }

    /// True for [`Keying::Ordered`].
    pub fn is_ordered(&self) -> bool {
        matches!(self, Keying::Ordered { .. })
    }
}

/// `tag` as a fraction of the key space in `alphabet` (empty: radix 256), scaled to a slot.
fn ordered_slot(tag: &[u8], alphabet: &[u8]) -> u16 {
    let radix: u128 = if alphabet.is_empty() {
        256
    } else {
        alphabet.len() as u128
    };
    let (mut num, mut den) = (0u128, 1u128);
    for &c in tag {
        let Some(next) = den.checked_mul(radix).filter(|d| *d <= PRECISION) else {
            break;
        };
        // A symbol outside the alphabet counts as its rank among the alphabet's symbols (the
        // gap it falls in) and ends the key: order is kept, whatever follows it.
        let (digit, last) = if alphabet.is_empty() {
            (u128::from(c), false)
        } else {
            match alphabet.binary_search(&c) {
                Ok(i) => (i as u128, false),
                Err(rank) => (rank as u128, true),
            }
        };
        num = num * radix + digit;
        den = next;
        if last {
            break;
        }
    }
    // num ≤ den (a rank may be `radix`), den ≤ 2^100: the product fits.
    let slot = num * u128::from(SLOTS) / den;
    u16::try_from(slot.min(u128::from(LAST_SLOT))).unwrap_or(LAST_SLOT)
}

impl fmt::Display for Keying {
    /// `hash`, `ordered` (every byte) or `ordered:<alphabet>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Keying::Hash => f.write_str("hash"),
            Keying::Ordered { alphabet } if alphabet.is_empty() => f.write_str("ordered"),
            Keying::Ordered { alphabet } => {
                write!(f, "ordered:{}", String::from_utf8_lossy(alphabet))
            }
        }
    }
}

impl FromStr for Keying {
    type Err = SlotError;

    /// Parses what [`Keying`]'s `Display` writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hash" => Ok(Keying::Hash),
            "ordered" => Ok(Keying::Ordered { alphabet: vec![] }),
            _ => match s.strip_prefix("ordered:") {
                Some(alphabet) if !alphabet.is_empty() => Keying::ordered(alphabet),
                _ => Err(SlotError::Keying(format!(
                    "{s:?} is not a keying: hash, ordered or ordered:<alphabet>"
                ))),
            },
        }
    }
}

impl From<Keying> for String {
    fn from(k: Keying) -> Self {
        k.to_string()
    }
}

impl TryFrom<String> for Keying {
    type Error = SlotError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const GEOHASH: &str = "0123456789bcdefghjkmnpqrstuvwxyz";

    proptest! {
        /// The order of keys is the order of their slots, in any alphabet, with symbols
        /// outside it.
        #[test]
        fn ordered_slots_keep_the_keys_order(
            a in proptest::collection::vec(any::<u8>(), 0..24),
            b in proptest::collection::vec(any::<u8>(), 0..24),
            alphabet in proptest::collection::btree_set(33u8..127, 2..40),
        ) {
            let alphabet: String = alphabet.into_iter().map(char::from).collect();
            let (a, b) = (String::from_utf8_lossy(&a).into_owned(), String::from_utf8_lossy(&b).into_owned());
            let (lo, hi) = if a.as_bytes() <= b.as_bytes() { (&a, &b) } else { (&b, &a) };
            // Tags only: braces would pick a part of the key.
            prop_assume!(!lo.contains('{') && !hi.contains('{'));
            for k in [Keying::ordered(&alphabet).unwrap(), Keying::Ordered { alphabet: vec![] }] {
                prop_assert!(k.slot_of(lo) <= k.slot_of(hi), "{k}: {lo:?} {hi:?}");
            }
        }

        /// Keys over the alphabet spread over the whole slot space: a key's first symbol
        /// picks its 1/32 of the slots.
        #[test]
        fn a_geohash_cell_lands_in_its_first_symbols_share(cell in "[0-9b-hjkmnp-z]{1,9}") {
            let k = Keying::ordered(GEOHASH).unwrap();
            let first = GEOHASH.find(cell.chars().next().unwrap()).unwrap() as u16;
            let slot = k.slot_of(&cell);
            prop_assert!((first * 512..(first + 1) * 512).contains(&slot), "{cell} {slot}");
        }
    }

    #[test]
    fn keyings_print_and_parse_back_and_bad_ones_are_refused() {
        for k in [
            Keying::Hash,
            Keying::Ordered { alphabet: vec![] },
            Keying::ordered(GEOHASH).unwrap(),
        ] {
            assert_eq!(k.to_string().parse::<Keying>().unwrap(), k);
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(serde_json::from_str::<Keying>(&json).unwrap(), k);
        }
        assert!("ordered:".parse::<Keying>().is_err());
        assert!("ordered:x".parse::<Keying>().is_err());
        assert!("ordered:é".parse::<Keying>().is_err());
        assert!("crc".parse::<Keying>().is_err());
        // Hash keying is the directory's historic function, and a tag still groups keys.
        assert_eq!(Keying::Hash.slot_of("post:{p9}"), slot_of("p9"));
        // The worked example of docs/resharding.md: the 9q cell is slots 4,960-4,975, and one
        // slot holds two 3-symbol cells.
        let geo = Keying::ordered(GEOHASH).unwrap();
        assert_eq!(geo.slot_of("9q"), 4_960);
        assert_eq!(geo.slot_of("9qzzzzzzzz"), 4_975);
        assert_eq!(geo.slot_of("9q8yyk"), 4_964);
        assert_eq!(geo.slot_of("9q9"), 4_964);
        // A tag whose varying part leads sorts by it; a long shared prefix eats the grain.
        let time = Keying::ordered("0123456789:").unwrap();
        assert!(time.slot_of("rides:{21:59}") < time.slot_of("rides:{22:00}"));
        assert_eq!(
            time.slot_of("{2026-12-06T21}"),
            time.slot_of("{2026-12-06T22}")
        );
    }
}

//! The apply rule: which of two versions of one item wins, whatever order they arrive in.

use serde::{Deserialize, Serialize};

/// One version of an item as the mover sees it: a live row at version `v`, or a tombstone
/// for a delete of the row at version `v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Version {
    /// A live row at `v` (snapshot row, stream INSERT/MODIFY, or a routed write).
    Live(u64),
    /// A deleted row whose last live version was `v`.
    Tombstone(u64),
}

impl Version {
    /// The total order the rule uses: by version, and at one version a tombstone above the
    /// live row it deleted.
    pub fn rank(self) -> (u64, u8) {
        match self {
            Self::Live(v) => (v, 0),
            Self::Tombstone(v) => (v, 1),
        }
    }
}

/// Whether `incoming` replaces `stored` (`None`: no item): only when it ranks strictly above.
///
/// Written on DynamoDB as the condition `attribute_not_exists(v) OR v < :v` for a live row,
/// and `attribute_not_exists(v) OR v < :v OR (v = :v AND attribute_not_exists(tomb))` for a
/// tombstone. Because the winner depends only on the two ranks, applying any set of versions
/// in any order, with any repeats, leaves the highest one: a late snapshot row cannot
/// overwrite a newer change or resurrect a delete, and a redelivered batch changes nothing.
pub fn wins(incoming: Version, stored: Option<Version>) -> bool {
    match stored {
        None => true,
        Some(s) => incoming.rank() > s.rank(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tombstones_block_late_rows_and_newer_rows_replace_tombstones() {
        assert!(wins(Version::Tombstone(3), Some(Version::Live(3))));
        assert!(!wins(Version::Live(3), Some(Version::Tombstone(3))));
        assert!(!wins(Version::Live(2), Some(Version::Tombstone(3))));
        assert!(wins(Version::Live(4), Some(Version::Tombstone(3))));
        assert!(
            !wins(Version::Live(3), Some(Version::Live(3))),
            "redelivery"
        );
    }

    /// A history of one key on the source: puts at rising versions, each possibly deleted.
    fn history() -> impl Strategy<Value = Vec<Version>> {
        prop::collection::vec(any::<bool>(), 1..12).prop_map(|dels| {
            let mut out = vec![];
            for (i, del) in dels.into_iter().enumerate() {
                let v = i as u64 + 1;
                out.push(Version::Live(v));
                if del {
                    out.push(Version::Tombstone(v));
                }
            }
            out
        })
    }

    /// One key's history, its stream deliveries (any order, some twice) and a snapshot row
    /// (the item at some point of its history) arriving at any point of the tail.
    fn case() -> impl Strategy<Value = (Vec<Version>, Vec<Version>)> {
        history().prop_flat_map(|h| {
            let n = h.len();
            (
                Just(h.clone()),
                Just(h).prop_shuffle(),
                prop::collection::vec((0..n, any::<prop::sample::Index>()), 0..20),
                0..n,
                any::<prop::sample::Index>(),
            )
                .prop_map(|(h, mut shuffled, dupes, snap, snap_at)| {
                    for (i, at) in dupes {
                        let pos = at.index(shuffled.len() + 1);
                        shuffled.insert(pos, h[i]);
                    }
                    // A snapshot row is a live state; a deleted state is simply absent from it.
                    if let Version::Live(_) = h[snap] {
                        let pos = snap_at.index(shuffled.len() + 1);
                        shuffled.insert(pos, h[snap]);
                    }
                    (h, shuffled)
                })
        })
    }

    proptest! {
        #[test]
        fn any_delivery_order_with_repeats_and_a_late_snapshot_row_ends_at_the_last_change(
            (h, deliveries) in case(),
        ) {
            let mut stored = None;
            for v in deliveries {
                if wins(v, stored) { stored = Some(v); }
            }
            prop_assert_eq!(stored, h.last().copied());
        }
    }
}

//! Which write a tail makes of one stream record.
//!
//! The forward tail (source → target) carries a delete as a **tombstone** at the deleted row's
//! version, because a snapshot row of the same item may still land on the target after it; the
//! apply rule ([`super::apply::wins`]) ranks a tombstone above the row it deleted. The reverse
//! tail (target → source, so a rollback loses nothing) carries a delete, and a tombstone, as a
//! delete bounded by that version: the source holds no snapshot in flight. Items of the moved
//! slots must carry a numeric version `v`; a record whose image has none is refused (the
//! mover stops and names the key), since the apply rule could not order it.

use super::apply::Version;
use super::phase::Way;

/// A stream record's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A new item.
    Insert,
    /// A changed item.
    Modify,
    /// A deleted item.
    Remove,
}

/// What the tail needs of one image of the item (old or new).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Image {
    /// Its numeric version `v`, if it has one.
    pub version: Option<u64>,
    /// It is a tombstone (a versioned delete).
    pub tombstone: bool,
}

/// The write a tail makes of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TailOp {
    /// Write the new image (or a tombstone) under the apply rule.
    Apply(Version),
    /// Delete the item where its version is at most this (reverse replication of a delete).
    DeleteUpTo(u64),
}

/// The record's image has no numeric version `v`: the apply rule cannot order it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the item has no numeric version `v`")]
pub struct Unversioned;

/// The write the `way` tail makes of a record `event` with images `old` and `new`.
pub fn tail_op(
    way: Way,
    event: Event,
    old: Option<Image>,
    new: Option<Image>,
) -> Result<TailOp, Unversioned> {
    let version = |image: Option<Image>| image.and_then(|i| i.version).ok_or(Unversioned);
    let deleted = match (event, new) {
        (Event::Remove, _) => Some(version(old)?),
        (_, Some(n)) if n.tombstone => Some(version(new)?),
        _ => None,
    };
    Ok(match (way, deleted) {
        (Way::Forward, Some(v)) => TailOp::Apply(Version::Tombstone(v)),
        (Way::Reverse, Some(v)) => TailOp::DeleteUpTo(v),
        (_, None) => TailOp::Apply(Version::Live(version(new)?)),
    })
}

#[cfg(test)]
mod tests {
    use super::super::apply::wins;
    use super::*;
    use proptest::prelude::*;

    fn live(v: u64) -> Option<Image> {
        Some(Image {
            version: Some(v),
            tombstone: false,
        })
    }

    fn tomb(v: u64) -> Option<Image> {
        Some(Image {
            version: Some(v),
            tombstone: true,
        })
    }

    #[test]
    fn deletes_become_tombstones_forward_and_bounded_deletes_back() {
        assert_eq!(
            tail_op(Way::Forward, Event::Remove, live(4), None),
            Ok(TailOp::Apply(Version::Tombstone(4)))
        );
        assert_eq!(
            tail_op(Way::Reverse, Event::Remove, live(4), None),
            Ok(TailOp::DeleteUpTo(4))
        );
        assert_eq!(
            tail_op(Way::Reverse, Event::Modify, live(4), tomb(5)),
            Ok(TailOp::DeleteUpTo(5))
        );
        assert_eq!(
            tail_op(Way::Forward, Event::Insert, None, live(1)),
            Ok(TailOp::Apply(Version::Live(1)))
        );
        let unversioned = Some(Image {
            version: None,
            tombstone: false,
        });
        assert_eq!(
            tail_op(Way::Forward, Event::Insert, None, unversioned),
            Err(Unversioned)
        );
        assert_eq!(
            tail_op(Way::Forward, Event::Remove, None, None),
            Err(Unversioned)
        );
    }

    /// A stored item as a table holds it: a live row or a tombstone at a version.
    type Stored = Option<Version>;

    fn apply(stored: Stored, op: TailOp) -> Stored {
        match op {
            TailOp::Apply(v) => {
                if wins(v, stored) {
                    Some(v)
                } else {
                    stored
                }
            }
            TailOp::DeleteUpTo(v) => match stored {
                Some(s) if s.rank().0 <= v => None,
                s => s,
            },
        }
    }

    /// What a reader sees: the live version, or nothing.
    fn visible(stored: Stored) -> Option<u64> {
        match stored {
            Some(Version::Live(v)) => Some(v),
            _ => None,
        }
    }

    /// One key's history on the writing side: puts at rising versions, some followed by a
    /// delete (a plain delete, or a versioned tombstone as `Router::delete` writes).
    fn history() -> impl Strategy<Value = Vec<(Event, Option<Image>, Option<Image>)>> {
        prop::collection::vec((any::<bool>(), any::<bool>()), 1..10).prop_map(|steps| {
            let mut out = vec![];
            let mut state: Option<Image> = None;
            let mut v = 0u64;
            for (del, as_tomb) in steps {
                v += 1;
                let event = if state.is_some() {
                    Event::Modify
                } else {
                    Event::Insert
                };
                out.push((event, state, live(v)));
                state = live(v);
                if del {
                    if as_tomb {
                        v += 1;
                        out.push((Event::Modify, state, tomb(v)));
                        state = tomb(v);
                    } else {
                        out.push((Event::Remove, state, None));
                        state = None;
                    }
                }
            }
            out
        })
    }

    proptest! {
        /// Forward: the stream in order (some records twice), with a snapshot row of any state
        /// landing at any point, leaves the target showing what the source shows.
        #[test]
        fn the_forward_tail_with_a_late_snapshot_row_shows_what_the_source_shows(
            h in history(),
            snap in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            twice in prop::collection::vec(any::<bool>(), 20),
        ) {
            let source_end = h.last().and_then(|(e, _, n)| if *e == Event::Remove { None } else { *n });
            let snapshot = h[snap.index(h.len())].2.filter(|i| !i.tombstone);
            let at = at.index(h.len() + 1);
            let mut target: Stored = None;
            for (i, (event, old, new)) in h.iter().enumerate() {
                if i == at && let Some(s) = snapshot {
                    target = apply(target, TailOp::Apply(Version::Live(s.version.unwrap_or(0))));
                }
                let op = tail_op(Way::Forward, *event, *old, *new).expect("versioned");
                target = apply(target, op);
                if twice.get(i).copied().unwrap_or(false) {
                    target = apply(target, op);
                }
            }
            if at == h.len() && let Some(s) = snapshot {
                target = apply(target, TailOp::Apply(Version::Live(s.version.unwrap_or(0))));
            }
            let want = source_end.filter(|i| !i.tombstone).and_then(|i| i.version);
            prop_assert_eq!(visible(target), want);
        }

        /// Reverse: the target's stream in order, over a source that holds any earlier state
        /// of the item (the copy), leaves the source showing what the target shows.
        #[test]
        fn the_reverse_tail_leaves_the_source_showing_what_the_target_shows(
            h in history(),
            start in any::<prop::sample::Index>(),
        ) {
            let from = start.index(h.len());
            let mut source: Stored = h[from].1.and_then(|i| {
                i.version.map(|v| if i.tombstone { Version::Tombstone(v) } else { Version::Live(v) })
            });
            for (event, old, new) in &h[from..] {
                let op = tail_op(Way::Reverse, *event, *old, *new).expect("versioned");
                source = apply(source, op);
            }
            let end = h.last().and_then(|(e, _, n)| if *e == Event::Remove { None } else { *n });
            let want = end.filter(|i| !i.tombstone).and_then(|i| i.version);
            prop_assert_eq!(visible(source), want);
        }
    }
}

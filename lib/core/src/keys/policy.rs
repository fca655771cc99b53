//! How many salts each key has, and how a change of S is carried out without losing a read.
//!
//! ```text
//!            change S a → b (old-only set non-empty)
//!   Steady(a) ─────────────────────────────────▶ Draining { current: b, draining: a }
//!      ▲         (old set ⊆ new set: straight to Steady(b))     │        │
//!      │                                                         │        │ change back to a:
//!      └──────── finish_drain (every old-only sub-key empty) ────┘        │ current a, draining b
//! ```
//! Writers write only the current set. Readers read the union of the current and draining sets
//! until the drain is finished, so a sub-key written under either S is always read.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::error::KeyError;
use super::salt::{SaltedKey, check_salts};

/// A key's salt count and, during a change of S, the old count still being drained.
///
/// The sub-key set of S is `{k}` for S = 1 and `{k#0, …, k#S-1}` otherwise. While `draining`
/// is `Some(a)`, sub-keys in the old set but not the current one (the *old-only* set) may still
/// hold data: readers must include them, and the drain may be finished only once each is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "SaltStateFields")]
pub struct SaltState {
    current: u16,
    draining: Option<u16>,
}

/// The serialized shape of [`SaltState`], validated on the way in.
#[derive(Deserialize)]
struct SaltStateFields {
    current: u16,
    draining: Option<u16>,
}

impl TryFrom<SaltStateFields> for SaltState {
    type Error = KeyError;

    fn try_from(f: SaltStateFields) -> Result<Self, KeyError> {
        check_salts(u32::from(f.current))?;
        match f.draining {
            None => Ok(Self::from_parts(f.current, None)),
            Some(old) => {
                check_salts(u32::from(old))?;
                Ok(Self::changing(old, f.current))
            }
        }
    }
}

impl Default for SaltState {
    fn default() -> Self {
        Self::UNSALTED
    }
}

impl SaltState {
    /// S = 1, not draining: the plain key.
    pub const UNSALTED: Self = Self {
        current: 1,
        draining: None,
    };

    /// A steady state with `salts` sub-keys (`1..=MAX_SALTS`).
    pub fn steady(salts: u16) -> Result<Self, KeyError> {
        check_salts(u32::from(salts))?;
        Ok(Self::from_parts(salts, None))
    }

    /// The salt count writers use.
    pub fn current(&self) -> u16 {
        self.current
    }

    /// The old salt count still being drained, if a change of S is in progress.
    pub fn draining(&self) -> Option<u16> {
        self.draining
    }

    /// The sub-keys a write may go to: the current set only.
    pub fn write_set(&self, key: &str) -> Result<Vec<String>, KeyError> {
        Ok(SaltedKey::new(key, self.current)?.sub_keys())
    }

    /// The sub-keys a reader must read: the current set, then the old-only set, no duplicates.
    pub fn read_set(&self, key: &str) -> Result<Vec<String>, KeyError> {
        let mut set = self.write_set(key)?;
        set.extend(self.drain_set(key)?);
        Ok(set)
    }

    /// The old-only sub-keys: in the draining set but not the current one; empty when steady.
    pub fn drain_set(&self, key: &str) -> Result<Vec<String>, KeyError> {
        let current = SaltedKey::new(key, self.current)?;
        let Some(old) = self.draining else {
            return Ok(Vec::new());
        };
        let old = SaltedKey::new(key, old)?;
        Ok(old_only(&old, &current))
    }

    /// Start changing S to `salts`: writers move to the new set at once, readers read both.
    ///
    /// Straight to steady when the old set is inside the new one (S ≥ 2 growing, or no change).
    /// While draining, only a no-op, a change back to the draining count, or growing to an S
    /// whose set contains the current or the draining set (both salted, S ≥ 2) is accepted.
    pub fn transition_to(&self, salts: u16) -> Result<Self, KeyError> {
        check_salts(u32::from(salts))?;
        match self.draining {
            None => Ok(Self::changing(self.current, salts)),
            Some(_) if salts == self.current => Ok(*self),
            Some(old) if salts == old => Ok(Self::changing(self.current, old)),
            // Growing mid-drain: when one of the two sets is inside the new one, readers still
            // need only two sets ({new} ∪ the other), so nothing written is missed.
            Some(old) if self.current >= 2 && salts > self.current => {
                Ok(Self::changing(old, salts))
            }
            Some(old) if old >= 2 && salts > old => Ok(Self::changing(self.current, salts)),
            Some(old) => Err(KeyError::TransitionInProgress {
                current: self.current,
                draining: old,
                requested: salts,
            }),
        }
    }

    /// Mark the drain complete; refused while `is_empty` says an old-only sub-key holds data.
    ///
    /// `is_empty(sub_key)` is the caller's knowledge of the store (e.g. a Query with `Limit 1`
    /// came back empty). It is asked about every old-only sub-key, in salt order.
    pub fn finish_drain(
        &self,
        key: &str,
        mut is_empty: impl FnMut(&str) -> bool,
    ) -> Result<Self, KeyError> {
        for sub_key in self.drain_set(key)? {
            if !is_empty(&sub_key) {
                return Err(KeyError::DrainNotEmpty { sub_key });
            }
        }
        Ok(Self::from_parts(self.current, None))
    }

    /// The state after changing from `old` to `new`, collapsed to steady when nothing drains.
    fn changing(old: u16, new: u16) -> Self {
        let old_inside_new = old == new || (old >= 2 && new >= old);
        Self::from_parts(new, (!old_inside_new).then_some(old))
    }

    const fn from_parts(current: u16, draining: Option<u16>) -> Self {
        Self { current, draining }
    }
}

/// Sub-keys of `old` that `current` does not have, in salt order.
fn old_only(old: &SaltedKey, current: &SaltedKey) -> Vec<String> {
    let keep = current.sub_keys();
    old.sub_keys()
        .into_iter()
        .filter(|s| !keep.contains(s))
        .collect()
}

/// Where S comes from for each key, and therefore what writers and readers touch.
pub trait SaltPolicy {
    /// The salt state of `key`; [`SaltState::UNSALTED`] for keys the policy does not name.
    fn state(&self, key: &str) -> SaltState;

    /// The salt count writers use for `key`.
    fn salts(&self, key: &str) -> u16 {
        self.state(key).current()
    }

    /// The sub-keys a write of `key` may go to.
    fn write_set(&self, key: &str) -> Result<Vec<String>, KeyError> {
        self.state(key).write_set(key)
    }

    /// The sub-keys a read of `key` must cover.
    fn read_set(&self, key: &str) -> Result<Vec<String>, KeyError> {
        self.state(key).read_set(key)
    }
}

/// A salt policy held in memory: a map key → [`SaltState`], S = 1 for every other key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixedSaltPolicy {
    states: HashMap<String, SaltState>,
}

impl FixedSaltPolicy {
    /// A policy under which every key is unsalted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Configure `key` with `salts` sub-keys, steady: only for keys with no data under another S.
    pub fn with_salts(mut self, key: impl Into<String>, salts: u16) -> Result<Self, KeyError> {
        let key = key.into();
        SaltedKey::new(key.as_str(), salts)?;
        self.put(key, SaltState::steady(salts)?);
        Ok(self)
    }

    /// Change `key`'s S (see [`SaltState::transition_to`]); returns the new state.
    pub fn change_salts(&mut self, key: &str, salts: u16) -> Result<SaltState, KeyError> {
        let next = self.state(key).transition_to(salts)?;
        // Validate the key against every salt count it will be read under.
        next.read_set(key)?;
        self.put(key.to_owned(), next);
        Ok(next)
    }

    /// Finish `key`'s drain (see [`SaltState::finish_drain`]); returns the new state.
    pub fn finish_drain(
        &mut self,
        key: &str,
        is_empty: impl FnMut(&str) -> bool,
    ) -> Result<SaltState, KeyError> {
        let next = self.state(key).finish_drain(key, is_empty)?;
        self.put(key.to_owned(), next);
        Ok(next)
    }

    /// Keys with a change of S in progress, with their states (in no particular order).
    pub fn draining(&self) -> impl Iterator<Item = (&str, SaltState)> {
        self.states
            .iter()
            .filter(|(_, s)| s.draining().is_some())
            .map(|(k, s)| (k.as_str(), *s))
    }

    fn put(&mut self, key: String, state: SaltState) {
        if state == SaltState::UNSALTED {
            self.states.remove(&key);
        } else {
            self.states.insert(key, state);
        }
    }
}

impl SaltPolicy for FixedSaltPolicy {
    fn state(&self, key: &str) -> SaltState {
        self.states.get(key).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{MAX_SALTS, SaltChoice};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn an_unknown_key_is_unsalted() {
        let p = FixedSaltPolicy::new();
        assert_eq!(p.salts("likes:p1"), 1);
        assert_eq!(p.read_set("likes:p1").unwrap(), vec!["likes:p1"]);
    }

    #[test]
    fn salting_a_hot_key_reads_the_plain_key_until_it_is_drained() {
        let mut p = FixedSaltPolicy::new();
        let s = p.change_salts("likes:p9", 4).unwrap();
        assert_eq!(s.draining(), Some(1));
        assert_eq!(
            p.write_set("likes:p9").unwrap(),
            vec!["likes:p9#0", "likes:p9#1", "likes:p9#2", "likes:p9#3"]
        );
        assert_eq!(
            p.read_set("likes:p9").unwrap(),
            vec![
                "likes:p9#0",
                "likes:p9#1",
                "likes:p9#2",
                "likes:p9#3",
                "likes:p9"
            ]
        );
        assert_eq!(
            p.finish_drain("likes:p9", |_| false),
            Err(KeyError::DrainNotEmpty {
                sub_key: "likes:p9".into()
            })
        );
        assert_eq!(
            p.finish_drain("likes:p9", |_| true),
            Ok(SaltState::steady(4).unwrap())
        );
        assert_eq!(p.read_set("likes:p9").unwrap().len(), 4);
    }

    #[test]
    fn growing_s_needs_no_drain_and_shrinking_does() {
        let grown = SaltState::steady(4).unwrap().transition_to(8).unwrap();
        assert_eq!(grown, SaltState::steady(8).unwrap());
        let shrunk = grown.transition_to(6).unwrap();
        assert_eq!(shrunk.draining(), Some(8));
        assert_eq!(shrunk.drain_set("k").unwrap(), vec!["k#6", "k#7"]);
        assert_eq!(shrunk.read_set("k").unwrap().len(), 8);
    }

    #[test]
    fn a_second_change_waits_for_the_first_drain() {
        let s = SaltState::steady(8).unwrap().transition_to(4).unwrap();
        assert_eq!(
            s.transition_to(2),
            Err(KeyError::TransitionInProgress {
                current: 4,
                draining: 8,
                requested: 2
            })
        );
        assert_eq!(s.transition_to(4), Ok(s));
        // Growing past both sets is allowed: {16} contains {4} and {8}.
        assert_eq!(s.transition_to(16), Ok(SaltState::steady(16).unwrap()));
        // Mid-drain back to the plain key, growing keeps the plain key readable.
        let cooling = SaltState::steady(3).unwrap().transition_to(1).unwrap();
        let regrown = cooling.transition_to(13).unwrap();
        assert_eq!((regrown.current(), regrown.draining()), (13, Some(1)));
        // Changing back is allowed: data is still only in the old and new sets.
        assert_eq!(s.transition_to(8), Ok(SaltState::steady(8).unwrap()));
    }

    #[test]
    fn a_stored_state_is_validated_when_loaded() {
        assert_eq!(
            SaltState::try_from(SaltStateFields {
                current: 1,
                draining: Some(8)
            }),
            SaltState::steady(8).unwrap().transition_to(1)
        );
        assert!(
            SaltState::try_from(SaltStateFields {
                current: 0,
                draining: None
            })
            .is_err()
        );
        assert!(
            SaltState::try_from(SaltStateFields {
                current: 4,
                draining: Some(MAX_SALTS + 1)
            })
            .is_err()
        );
        // A stored "draining into a superset" collapses to steady.
        assert_eq!(
            SaltState::try_from(SaltStateFields {
                current: 8,
                draining: Some(4)
            }),
            Ok(SaltState::steady(8).unwrap())
        );
    }

    /// One step of the model: writes, S changes, a drainer emptying old-only sub-keys, and
    /// drain completions, on a few keys.
    #[derive(Debug, Clone)]
    enum Op {
        Write { key: usize, r: u64 },
        ChangeS { key: usize, salts: u16 },
        EmptyOldOnly { key: usize },
        FinishDrain { key: usize },
    }

    const KEYS: [&str; 3] = ["likes:p9", "USER#nova", "a"];

    fn op() -> impl Strategy<Value = Op> {
        let key = 0..KEYS.len();
        prop_oneof![
            4 => (key.clone(), any::<u64>()).prop_map(|(key, r)| Op::Write { key, r }),
            2 => (key.clone(), 1u16..=16)
                .prop_map(|(key, salts)| Op::ChangeS { key, salts }),
            1 => key.clone().prop_map(|key| Op::EmptyOldOnly { key }),
            2 => key.prop_map(|key| Op::FinishDrain { key }),
        ]
    }

    proptest! {
        #[test]
        fn every_written_subkey_is_read_during_a_transition(
            ops in proptest::collection::vec(op(), 1..80)
        ) {
            let mut policy = FixedSaltPolicy::new();
            // sub-key → number of items in it; a drainer moves items, never drops them.
            let mut store: BTreeMap<String, u64> = BTreeMap::new();
            let mut written = 0u64;
            for op in ops {
                match op {
                    Op::Write { key, r } => {
                        let k = KEYS[key];
                        let salted = SaltedKey::new(k, policy.salts(k)).unwrap();
                        let sub = salted.write_key(SaltChoice::Random(r));
                        prop_assert!(policy.write_set(k).unwrap().contains(&sub));
                        *store.entry(sub).or_default() += 1;
                        written += 1;
                    }
                    Op::ChangeS { key, salts } => {
                        let k = KEYS[key];
                        let before = policy.state(k);
                        match policy.change_salts(k, salts) {
                            Ok(after) => prop_assert_eq!(after.current(), salts),
                            Err(KeyError::TransitionInProgress { .. }) => {
                                prop_assert!(before.draining().is_some());
                                prop_assert_eq!(policy.state(k), before);
                            }
                            Err(e) => prop_assert!(false, "unexpected {e}"),
                        }
                    }
                    Op::EmptyOldOnly { key } => {
                        // The drainer: move every item of an old-only sub-key into the write set.
                        let k = KEYS[key];
                        let target = policy.write_set(k).unwrap()[0].clone();
                        for sub in policy.state(k).drain_set(k).unwrap() {
                            if let Some(n) = store.remove(&sub) {
                                *store.entry(target.clone()).or_default() += n;
                            }
                        }
                    }
                    Op::FinishDrain { key } => {
                        let k = KEYS[key];
                        let before = policy.state(k);
                        let old_only_empty = before
                            .drain_set(k)
                            .unwrap()
                            .iter()
                            .all(|s| !store.contains_key(s));
                        let result = policy.finish_drain(k, |s| !store.contains_key(s));
                        prop_assert_eq!(result.is_ok(), old_only_empty);
                        if result.is_err() {
                            prop_assert_eq!(policy.state(k), before);
                        }
                    }
                }
                // The invariant: every non-empty sub-key is in its key's read set.
                for sub in store.keys() {
                    let key = crate::keys::parse_sub_key(sub).unwrap().0;
                    let read = policy.read_set(key).unwrap();
                    prop_assert!(read.contains(sub), "{} unread by {:?}", sub, read);
                }
                prop_assert_eq!(store.values().sum::<u64>(), written);
            }
        }

        #[test]
        fn the_read_set_is_the_union_of_old_and_new_sets_without_duplicates(
            a in 1u16..=MAX_SALTS, b in 1u16..=MAX_SALTS
        ) {
            let s = SaltState::steady(a).unwrap().transition_to(b).unwrap();
            let read = s.read_set("k").unwrap();
            for w in s.write_set("k").unwrap() {
                prop_assert!(read.contains(&w));
            }
            for old in SaltState::steady(a).unwrap().write_set("k").unwrap() {
                prop_assert!(read.contains(&old));
            }
            let unique: std::collections::BTreeSet<&String> = read.iter().collect();
            prop_assert_eq!(unique.len(), read.len());
            let expected = usize::from(a.max(b)) + usize::from((a == 1) != (b == 1));
            prop_assert_eq!(read.len(), expected);
        }
    }
}

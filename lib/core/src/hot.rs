//! The hot-key directory's records and the mitigation controller's decisions (see
//! docs/detection.md).
//!
//! Detection names a hot key; this module decides what to do about it and remembers the
//! decision. A directory entry says, for one key, which mitigation is on: **cache** its reads
//! (read-hot: a micro-cache in each router absorbs them), **salt** its writes over S sub-keys
//! (write-hot: S from the shard-load sizing planner), or **limit** a tenant (abusive: admission
//! answers 429). Readers and writers load the directory with a bounded age ([`Snapshot`] plugs
//! into the write-sharding [`SaltPolicy`](crate::keys::SaltPolicy)), and every change is
//! conditional on the entry's `epoch`, so two controllers never overwrite each other's decision
//! unseen.
//!
//! The controller ([`decide`]) is a pure function of the signals (sampler reports, Contributor
//! Insights contributors), the current entries and the time. It acts at `on_share` of a
//! partition's ceiling and lets go only below `off_share`, after the key has been calm for
//! `merge_delay` *and* the mitigation is at least `min_age` old, so a key hovering at the
//! threshold never flaps:
//!
//! ```text
//!             share ≥ on (0.8)                      share < off (0.5)
//!   (none) ───────────────────▶ Active ──────────────────────────────▶ Calm(since t)
//!      ▲                          ▲ │ write rate needs more S: S grows    │   │
//!      │                          │ └──────────────────────────────────┘ │   │
//!      │                          └──────── share ≥ off again ───────────┘   │
//!      │  cache/limit: removed   now − t ≥ merge_delay and age ≥ min_age     │
//!      └────────────────────────────────────────────────────────────────────┘
//!         salt: S → 1 with the old set *draining* (readers keep reading it);
//!         the entry stays until a drain check finds every old sub-key empty
//! ```
//!
//! ```
//! use heatsink_core::hot::{decide, Thresholds, Mode, Signal, Change};
//! use heatsink_core::detect::Kind;
//!
//! // The celebrity post p9 takes 2,400 likes/s against a 1,000 WCU/s partition.
//! let signals = [Signal::new("p9", Kind::Write, 2_400.0, 1_000.0, "sampler")];
//! let changes = decide(&signals, &[], 1_000, &Thresholds::default());
//! let Change::Put { entry, expected_epoch } = &changes[0] else { unreachable!() };
//! assert_eq!((entry.mode, entry.salts.current(), *expected_epoch), (Mode::Salt, 3, None));
//! ```
//!
//! Salted data outlives the mitigation: after a cool-down writers go back to the plain key but
//! readers must still read the old sub-keys, so a salt entry is never expired by time; it drains
//! (see [`SaltState`]) and is removed only once its old sub-keys are empty. Cache and limit
//! entries carry an `expires` time and are ignored after it, so a dead controller cannot leave a
//! key cached or limited for ever.

mod control;
mod entry;

pub use control::{Change, Signal, Thresholds, by_logical_key, decide};
pub use entry::{Entry, HotError, Mode, Snapshot};

use crate::keys::SaltState;

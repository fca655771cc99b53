//! Mitigating a hot key without a deploy: the hot-key directory, the controller that edits it,
//! the admission gate and the micro-cache (see docs/detection.md and docs/hot-keys.md).
//!
//! Detection ([`crate::detect`], [`crate::insights`]) names a key; this module decides what to
//! do about it and carries the decision to every router. A directory entry says, for one key,
//! which mitigation is on:
//!
//! | mode | the key is | what routers do | where |
//! |---|---|---|---|
//! | `salt` | write-hot | spread its writes over S sub-keys, read them all back | [`CachedDirectory`] as a `SaltPolicy` |
//! | `cache` | read-hot | answer its reads from memory for about a second | [`cache`] (feature `cache`) |
//! | `limit` | abusive | refuse requests beyond its rate with a `Retry-After` | [`Gate`] over [`guard`] |
//!
//! The decision itself is pure ([`decide`], re-exported from `heatsink_core::hot`): it acts at
//! 80 % of a partition's ceiling and lets go below 50 %, after a merge delay, so a key hovering
//! at the threshold never flaps. [`Controller`] runs it against the `hotkeys` table
//! ([`Directory`]): every change is conditional on the entry's epoch, so two controllers never
//! overwrite each other unseen. Routers read the table through a [`CachedDirectory`] at most
//! once per `max_age`.
//!
//! ```
//! use heatsink::hot::{decide, Change, Mode, Signal, Thresholds};
//! use heatsink::detect::Kind;
//!
//! // The celebrity post p9 takes 2,400 likes/s against a 1,000 WCU/s partition: salt it, S = 3.
//! let signals = [Signal::new("p9", Kind::Write, 2_400.0, 1_000.0, "sampler")];
//! let changes = decide(&signals, &[], 1_000, &Thresholds::default());
//! let Change::Put { entry, .. } = &changes[0] else { unreachable!() };
//! assert_eq!((entry.mode, entry.salts.current()), (Mode::Salt, 3));
//! ```
//!
//! Limits: one Scan of the directory per `max_age` per process (default 1 s), served stale for
//! at most `max_stale` (60 s) while the table does not answer; at most 1,000 live entries and
//! S ≤ 64 per entry by default ([`ControllerConfig`]); keys up to [`MAX_KEY_BYTES`] bytes.

pub mod admission;
#[cfg(feature = "cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "cache")))]
pub mod cache;
pub mod control;
pub mod controller;
pub mod directory;
pub mod drain;

/// Admission decisions: GCRA buckets per key and tenant (pure).
pub use heatsink_core::guard;
pub use heatsink_core::hot::*;

pub use admission::{Gate, REJECTED, tenant_key};
pub use control::*;
pub use controller::*;
pub use directory::*;

//! One hot-key directory entry, and a loaded directory as a salt policy.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::SaltState;
use crate::keys::{KeyError, SaltPolicy};

/// Errors of the hot-key directory's records.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HotError {
    /// A mode name other than `cache`, `salt` or `limit`.
    #[error("unknown mitigation mode {0:?} (expected cache, salt or limit)")]
    UnknownMode(String),
    /// The entry is inconsistent (e.g. a limit entry without a rate).
    #[error("hot-key entry {key:?}: {reason}")]
    Invalid {
        /// The entry's key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The salt count or transition is not valid.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Which mitigation a directory entry turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Read-hot: serve reads from the routers' micro-cache.
    Cache,
    /// Write-hot: spread writes over S salted sub-keys.
    Salt,
    /// Abusive tenant or key: admit at most `limit_per_second` requests per second.
    Limit,
}

impl Mode {
    /// The name stored in the directory and used by the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Cache => "cache",
            Mode::Salt => "salt",
            Mode::Limit => "limit",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = HotError;

    fn from_str(s: &str) -> Result<Self, HotError> {
        match s {
            "cache" => Ok(Mode::Cache),
            "salt" => Ok(Mode::Salt),
            "limit" => Ok(Mode::Limit),
            other => Err(HotError::UnknownMode(other.to_owned())),
        }
    }
}

/// One key's mitigation: `key → {mode, S, epoch, reason, since, expires}`.
///
/// Times are whole seconds since the Unix epoch (the unit of DynamoDB's TTL attribute).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The hot key (a partition key, or `tenant#<id>` for a tenant limit).
    pub key: String,
    /// The mitigation.
    pub mode: Mode,
    /// Salt mode: writers' S and, while cooling down, the old S readers still read.
    pub salts: SaltState,
    /// Limit mode: requests per second admitted.
    pub limit_per_second: Option<u32>,
    /// Bumped by every change; a change applies only if the stored epoch is the one it read.
    pub epoch: u64,
    /// Why: the signal that caused the latest change (human readable).
    pub reason: String,
    /// When the current mitigation started.
    pub since: u64,
    /// When the key was last seen below `off_share`; `None` while it is hot.
    pub calm_since: Option<u64>,
    /// After this time the entry is ignored (cache and limit only; salt entries never expire).
    pub expires: Option<u64>,
}

impl Entry {
    /// A new cache entry expiring at `expires`.
    pub fn cache(key: &str, reason: &str, now: u64, expires: u64) -> Self {
        Self::base(key, Mode::Cache, reason, now, Some(expires))
    }

    /// A new salt entry with `salts` sub-keys (never expires by time).
    pub fn salt(key: &str, salts: u16, reason: &str, now: u64) -> Result<Self, HotError> {
        let mut entry = Self::base(key, Mode::Salt, reason, now, None);
        entry.salts = SaltState::UNSALTED.transition_to(salts)?;
        Ok(entry)
    }

    /// A new limit entry admitting `per_second` requests per second until `expires`.
    pub fn limit(key: &str, per_second: u32, reason: &str, now: u64, expires: u64) -> Self {
        let mut entry = Self::base(key, Mode::Limit, reason, now, Some(expires));
        entry.limit_per_second = Some(per_second);
        entry
    }

    fn base(key: &str, mode: Mode, reason: &str, now: u64, expires: Option<u64>) -> Self {
        Self {
            key: key.to_owned(),
            mode,
            salts: SaltState::UNSALTED,
            limit_per_second: None,
            epoch: 1,
            reason: reason.to_owned(),
            since: now,
            calm_since: None,
            expires,
        }
    }

    /// Whether the entry is in force at `now` (not past `expires`).
    pub fn is_live(&self, now: u64) -> bool {
        self.expires.is_none_or(|e| now < e)
    }

    /// Checks the fields agree with the mode (what a loaded record must satisfy).
    pub fn validate(&self) -> Result<(), HotError> {
        let invalid = |reason: &str| {
            Err(HotError::Invalid {
                key: self.key.clone(),
                reason: reason.to_owned(),
            })
        };
        if self.key.is_empty() {
            return invalid("empty key");
        }
        match self.mode {
            Mode::Limit if self.limit_per_second.is_none() => invalid("limit without a rate"),
            Mode::Salt if self.expires.is_some() => {
                invalid("a salt entry must not expire (readers need its sub-keys)")
            }
            Mode::Cache | Mode::Limit if self.salts != SaltState::UNSALTED => {
                invalid("only salt entries have S > 1")
            }
            _ => Ok(()),
        }
    }

    /// Whether a salt entry is cooling down: writers are back on fewer sub-keys, readers drain.
    pub fn is_draining(&self) -> bool {
        self.salts.draining().is_some()
    }
}

/// The directory as loaded at one time: a salt policy for writers and readers, plus lookups.
///
/// Entries past `expires` at the snapshot's time are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    entries: HashMap<String, Entry>,
    at: u64,
}

impl Snapshot {
    /// The live entries among `entries` at time `now`.
    pub fn new(entries: impl IntoIterator<Item = Entry>, now: u64) -> Self {
        let entries = entries
            .into_iter()
            .filter(|e| e.is_live(now))
            .map(|e| (e.key.clone(), e))
            .collect();
        Self { entries, at: now }
    }

    /// The time the snapshot was taken.
    pub fn at(&self) -> u64 {
        self.at
    }

    /// The entry of `key`, if any mitigation is on.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// Whether reads of `key` should go through the micro-cache.
    pub fn is_cached(&self, key: &str) -> bool {
        self.get(key).is_some_and(|e| e.mode == Mode::Cache)
    }

    /// The admission limit of `key` (a key or `tenant#<id>`), requests per second.
    pub fn limit(&self, key: &str) -> Option<u32> {
        self.get(key)
            .filter(|e| e.mode == Mode::Limit)
            .and_then(|e| e.limit_per_second)
    }

    /// Every entry, by key.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no mitigation is on.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl SaltPolicy for Snapshot {
    fn state(&self, key: &str) -> SaltState {
        self.get(key)
            .filter(|e| e.mode == Mode::Salt)
            .map_or(SaltState::UNSALTED, |e| e.salts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip_and_unknown_is_typed() {
        for mode in [Mode::Cache, Mode::Salt, Mode::Limit] {
            assert_eq!(mode.as_str().parse::<Mode>(), Ok(mode));
        }
        assert_eq!(
            "shard".parse::<Mode>(),
            Err(HotError::UnknownMode("shard".into()))
        );
    }

    #[test]
    fn snapshot_drops_expired_entries_and_salts_only_salt_entries() {
        let salt = Entry::salt("p9", 4, "write-hot", 100).unwrap();
        let cache = Entry::cache("p1", "read-hot", 100, 160);
        let limit = Entry::limit("tenant#t1", 50, "abuse", 100, 130);
        let snap = Snapshot::new([salt, cache, limit], 140);
        assert_eq!(snap.salts("p9"), 4);
        assert_eq!(snap.salts("p1"), 1, "a cache entry does not salt");
        assert!(snap.is_cached("p1"));
        assert_eq!(snap.limit("tenant#t1"), None, "expired at 130");
        assert_eq!(snap.len(), 2);
        assert_eq!(
            snap.write_set("p9").unwrap(),
            ["p9#0", "p9#1", "p9#2", "p9#3"]
        );
    }

    #[test]
    fn draining_salt_entry_reads_old_set_and_writes_plain_key() {
        let mut e = Entry::salt("p9", 4, "write-hot", 0).unwrap();
        e.salts = e.salts.transition_to(1).unwrap();
        assert!(e.is_draining());
        let snap = Snapshot::new([e], 10);
        assert_eq!(snap.write_set("p9").unwrap(), ["p9"]);
        assert_eq!(snap.read_set("p9").unwrap().len(), 5);
    }

    #[test]
    fn validate_rejects_inconsistent_entries() {
        let mut limit = Entry::limit("k", 1, "r", 0, 10);
        limit.limit_per_second = None;
        assert!(matches!(limit.validate(), Err(HotError::Invalid { .. })));
        let mut salt = Entry::salt("k", 2, "r", 0).unwrap();
        salt.expires = Some(5);
        assert!(salt.validate().is_err());
        let mut cache = Entry::cache("k", "r", 0, 10);
        cache.salts = SaltState::steady(2).unwrap();
        assert!(cache.validate().is_err());
        assert!(Entry::cache("", "r", 0, 1).validate().is_err());
        assert!(Entry::salt("k", 8, "r", 0).unwrap().validate().is_ok());
    }
}

//! Proof that a salted key is drained before its entry is removed.
//!
//! Clearing a `salt` entry sends writers back to the plain key at once, but readers keep reading
//! the old sub-keys until the entry is gone; removing it while a sub-key still holds items would
//! hide those items from every reader. So the removal waits for proof, not for time: each
//! sub-key readers still read (except the plain key, which they keep reading) is queried, and
//! only an empty answer for every one of them lets the entry go. The check costs one strongly
//! consistent `Query` with `Limit 1` and `Select COUNT` per sub-key (at most 64 by
//! [`crate::hot::ControllerConfig`]'s default), so at most 64 read units.
//!
//! ```
//! use heatsink::hot::{Entry, drain};
//!
//! // p9 salted over 3 sub-keys: all three must be empty before the entry may go.
//! let entry = Entry::salt("p9", 3, "launch day", 1_000)?;
//! assert_eq!(drain::sub_keys_to_verify(&entry)?, ["p9#0", "p9#1", "p9#2"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use aws_sdk_dynamodb::types::Select;
use heatsink_core::hot::{Entry, HotError, Mode};

use super::DirectoryError;
use crate::ddb::{KeyCondition, QueryKey, s};
use crate::error::AwsError;

/// The sub-keys that must be empty before `entry` may be removed: every sub-key readers still
/// read (the current set and, while draining, the old-only set), except the plain key itself,
/// which readers keep reading once the entry is gone. Empty for entries that are not `salt`.
///
/// # Errors
/// [`HotError`] when the entry's salt state names no valid read set for its key.
pub fn sub_keys_to_verify(entry: &Entry) -> Result<Vec<String>, HotError> {
    if entry.mode != Mode::Salt {
        return Ok(Vec::new());
    }
    let read = entry.salts.read_set(&entry.key).map_err(HotError::from)?;
    Ok(read.into_iter().filter(|k| *k != entry.key).collect())
}

/// Which of `sub_keys` still hold at least one item in `table`, whose partition key attribute is
/// `key_attribute` (one strongly consistent `Query`, `Limit 1`, per sub-key, in order).
///
/// # Errors
/// [`DirectoryError::Aws`] when a Query fails; nothing is assumed about the sub-keys not read.
pub async fn sub_keys_holding_items(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    key_attribute: &str,
    sub_keys: &[String],
) -> Result<Vec<String>, DirectoryError> {
    let mut holding = Vec::new();
    for sub_key in sub_keys {
        let out = ddb
            .query()
            .table_name(table)
            .query_key(&KeyCondition::partition(key_attribute, s(sub_key)))
            .select(Select::Count)
            .consistent_read(true)
            .limit(1)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("Query", table, e))?;
        if out.count() > 0 {
            holding.push(sub_key.clone());
        }
    }
    Ok(holding)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn salted(key: &str, salts: u16) -> Entry {
        Entry::salt(key, salts, "test", 1_000).expect("valid salts")
    }

    #[test]
    fn every_sub_key_readers_read_is_verified() {
        let keys = sub_keys_to_verify(&salted("p9", 4)).expect("valid");
        assert_eq!(keys, ["p9#0", "p9#1", "p9#2", "p9#3"]);
    }

    #[test]
    fn entries_that_do_not_salt_need_no_proof() {
        let entry = Entry::cache("p9", "test", 0, 10);
        assert!(sub_keys_to_verify(&entry).expect("valid").is_empty());
    }
}

//! Read-error recovery as data: what a shard's reader does when GetRecords or
//! GetShardIterator fails.
//!
//! - an **expired iterator** is reopened where reading stands (after the last record read, or
//!   where the read began): nothing is skipped or read twice;
//! - **trimmed** records (the position fell past retention before it was read) are lost: the
//!   reader reports them and reopens at `TRIM_HORIZON`, the oldest record left; a trimmed
//!   answer at `TRIM_HORIZON` itself is transient and backed off;
//! - a shard **not found** is gone: the reader ends it (its lease is marked DELETED so its
//!   children proceed);
//! - anything else (throttling, a timeout, a 5xx) is backed off and the same call tried again.
//!
//! ```
//! use heatsink_core::stream::{ReadFailure, Recovery};
//!
//! assert_eq!(ReadFailure::ExpiredIterator.after_get_records(), Recovery::Reopen);
//! assert_eq!(ReadFailure::Trimmed.after_get_records(), Recovery::TrimHorizon);
//! assert_eq!(ReadFailure::Trimmed.after_get_iterator(true), Recovery::BackOff);
//! assert_eq!(ReadFailure::NotFound.after_get_iterator(false), Recovery::Gone);
//! ```

/// How a read call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFailure {
    /// The shard iterator expired (`ExpiredIteratorException`).
    ExpiredIterator,
    /// The position is past retention (`TrimmedDataAccessException`).
    Trimmed,
    /// The shard or stream is gone (`ResourceNotFoundException`).
    NotFound,
    /// Anything else: throttling, a timeout, a server error.
    Other,
}

/// What the reader does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Get a new iterator where reading stands.
    Reopen,
    /// Report the records from where reading stands lost, and get an iterator at
    /// `TRIM_HORIZON`.
    TrimHorizon,
    /// End the shard: it no longer exists.
    Gone,
    /// Wait the back-off and make the same call again.
    BackOff,
}

impl ReadFailure {
    /// After a failed GetRecords.
    pub fn after_get_records(self) -> Recovery {
        match self {
            Self::ExpiredIterator => Recovery::Reopen,
            Self::Trimmed => Recovery::TrimHorizon,
            Self::NotFound => Recovery::Gone,
            Self::Other => Recovery::BackOff,
        }
    }

    /// After a failed GetShardIterator; `at_trim_horizon` when it asked for `TRIM_HORIZON`.
    pub fn after_get_iterator(self, at_trim_horizon: bool) -> Recovery {
        match self {
            Self::NotFound => Recovery::Gone,
            Self::Trimmed if !at_trim_horizon => Recovery::TrimHorizon,
            Self::Trimmed | Self::ExpiredIterator | Self::Other => Recovery::BackOff,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn failure() -> impl Strategy<Value = Option<ReadFailure>> {
        prop_oneof![
            4 => Just(None),
            1 => Just(Some(ReadFailure::ExpiredIterator)),
            1 => Just(Some(ReadFailure::Other)),
            1 => Just(Some(ReadFailure::Trimmed)),
        ]
    }

    /// A shard holding records `1..=len`, those below `horizon` trimmed, read by a reader that
    /// follows the recovery rules; `calls` says how each call goes (`None`: as the shard
    /// answers; an injected `Trimmed` only where the records really are trimmed). Returns the
    /// records delivered, the first record reported lost (if any), and whether it ended.
    fn read(
        len: u64,
        horizon: u64,
        calls: &[Option<ReadFailure>],
    ) -> (Vec<u64>, Option<u64>, bool) {
        let mut next = 1; // where reading stands
        let mut iterator: Option<u64> = None;
        let mut delivered = Vec::new();
        let mut lost = None;
        let mut at_trim_horizon = false;
        let mut expired = false; // an expired iterator stays expired
        for call in calls {
            match iterator {
                None => {
                    // GetShardIterator at `next` (TRIM_HORIZON once trimmed records were reported).
                    let failure = match call {
                        Some(ReadFailure::Trimmed) | None if next < horizon => {
                            Some(ReadFailure::Trimmed)
                        }
                        Some(ReadFailure::Trimmed) => None,
                        other => *other,
                    };
                    match failure.map(|f| f.after_get_iterator(at_trim_horizon)) {
                        None => {
                            iterator = Some(next);
                            at_trim_horizon = false;
                            expired = false;
                        }
                        Some(Recovery::TrimHorizon) => {
                            lost.get_or_insert(next);
                            next = horizon;
                            at_trim_horizon = true;
                        }
                        Some(Recovery::Gone) => return (delivered, lost, true),
                        Some(Recovery::Reopen | Recovery::BackOff) => {}
                    }
                }
                Some(at) => {
                    let failure = match call {
                        _ if expired => Some(ReadFailure::ExpiredIterator),
                        Some(ReadFailure::ExpiredIterator) => {
                            expired = true;
                            Some(ReadFailure::ExpiredIterator)
                        }
                        Some(ReadFailure::Trimmed) if at >= horizon => None,
                        None if at < horizon => Some(ReadFailure::Trimmed),
                        other => *other,
                    };
                    match failure.map(ReadFailure::after_get_records) {
                        None => {
                            // Two records an answer, SHARD_END after the last.
                            let upto = (at + 1).min(len);
                            delivered.extend(at..=upto);
                            next = upto + 1;
                            iterator = Some(next);
                            if next > len {
                                return (delivered, lost, true);
                            }
                        }
                        Some(Recovery::Reopen) => iterator = None,
                        Some(Recovery::TrimHorizon) => {
                            lost.get_or_insert(next);
                            next = horizon;
                            iterator = None;
                            at_trim_horizon = true;
                        }
                        Some(Recovery::Gone) => return (delivered, lost, true),
                        Some(Recovery::BackOff) => {}
                    }
                }
            }
        }
        (delivered, lost, false)
    }

    proptest! {
        #[test]
        fn no_failure_skips_or_repeats_a_record_and_only_trimmed_ones_are_lost(
            len in 1u64..40,
            h in 0u64..50,
            calls in proptest::collection::vec(failure(), 0..200),
        ) {
            let horizon = 1 + h % (len + 1);
            let (delivered, lost, _) = read(len, horizon, &calls);
            let first = delivered.first().copied();
            prop_assert!(delivered.windows(2).all(|w| w[1] == w[0] + 1),
                "in order, no gap, no repeat: {:?}", delivered);
            match lost {
                None => prop_assert!(first.is_none_or(|f| f == 1), "nothing skipped silently"),
                Some(at) => {
                    prop_assert!(at < horizon, "only trimmed records are reported lost");
                    prop_assert!(first.is_none_or(|f| f == horizon), "resumed at the horizon");
                }
            }
        }

        #[test]
        fn a_reader_that_is_answered_reads_to_the_end(
            len in 1u64..40,
            h in 0u64..50,
            failures in proptest::collection::vec(failure(), 0..40),
        ) {
            // After any failures, enough good answers end the shard.
            let horizon = 1 + h % (len + 1);
            let mut calls = failures;
            calls.extend(std::iter::repeat_n(None, 200));
            let (delivered, _, ended) = read(len, horizon, &calls);
            prop_assert!(ended);
            if horizon <= len {
                prop_assert_eq!(delivered.last().copied(), Some(len), "read to the end");
            }
        }
    }

    #[test]
    fn a_trimmed_answer_at_the_horizon_is_backed_off_not_reported_again() {
        assert_eq!(
            ReadFailure::Trimmed.after_get_iterator(true),
            Recovery::BackOff
        );
        assert_eq!(
            ReadFailure::Trimmed.after_get_iterator(false),
            Recovery::TrimHorizon
        );
    }

    #[test]
    fn only_not_found_ends_the_shard() {
        for f in [
            ReadFailure::ExpiredIterator,
            ReadFailure::Trimmed,
            ReadFailure::NotFound,
            ReadFailure::Other,
        ] {
            let ends = f == ReadFailure::NotFound;
            assert_eq!(f.after_get_records() == Recovery::Gone, ends, "{f:?}");
            for th in [false, true] {
                assert_eq!(f.after_get_iterator(th) == Recovery::Gone, ends, "{f:?}");
            }
        }
    }
}

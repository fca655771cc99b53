//! Reading a counter (sum of its sub-keys) and rebuilding it (the `fix` correction).

use super::{CounterError, SubKey};

/// A counter read: the sum of its partition's sub-keys, split by kind for observability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterSum {
    writers: i64,
    settled: i64,
    salted: i64,
    fix: i64,
    total: i64,
}

impl CounterSum {
    /// Sum of the writer sub-keys (`w#…`).
    pub fn writers(&self) -> i64 {
        self.writers
    }

    /// The folded totals of closed writers (`settled`; 0 if absent): part of the writers' count.
    pub fn settled(&self) -> i64 {
        self.settled
    }

    /// Sum of the salted sub-keys (`s#…`).
    pub fn salted(&self) -> i64 {
        self.salted
    }

    /// The correction written by the last rebuild (`fix`; 0 if absent).
    pub fn fix(&self) -> i64 {
        self.fix
    }

    /// Writers + settled + salted, the part a rebuild compares with its recount.
    pub fn without_fix(&self) -> i64 {
        self.total - self.fix
    }

    /// The count a reader sees: writers + settled + salted + fix.
    pub fn total(&self) -> i64 {
        self.total
    }
}

/// Sums one counter's items, given as `(sort key, value)` pairs from one Query of its partition.
///
/// The value is a writer sub-key's `total`, the `settled` total, a salted sub-key's sum, or the
/// `fix`. An item with an
/// unknown sort key is an error rather than silently counted or dropped.
pub fn sum_counter<I, S>(items: I) -> Result<CounterSum, CounterError>
where
    I: IntoIterator<Item = (S, i64)>,
    S: AsRef<str>,
{
    let mut sum = CounterSum::default();
    for (sk, value) in items {
        let slot = match SubKey::parse(sk.as_ref())? {
            SubKey::Writer(_) => &mut sum.writers,
            SubKey::Salt(_) => &mut sum.salted,
            SubKey::Fix => &mut sum.fix,
            SubKey::Settled => &mut sum.settled,
        };
        *slot = slot.checked_add(value).ok_or(CounterError::Overflow)?;
        sum.total = sum.total.checked_add(value).ok_or(CounterError::Overflow)?;
    }
    Ok(sum)
}

/// What a rebuild writes to `fix`, and how far the count had drifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Correction {
    /// The new absolute `fix` value: after writing it, a read equals the recount.
    pub fix: i64,
    /// New fix minus the old one: the drift since the last rebuild (lost flushes are positive,
    /// double-applied salted writes negative). Zero means the sub-keys were exact.
    pub change: i64,
}

/// The `fix` value that makes a read equal `true_count`, given the sub-keys' sum without `fix`.
///
/// The fix is absolute, not a delta, so two rebuilds racing each other or a retried rebuild
/// write cannot stack. It is exact when no flush lands between the recount and the read of the
/// sub-keys; otherwise it is off by those flushes until the next rebuild.
pub fn correction(
    true_count: i64,
    sum_without_fix: i64,
    current_fix: i64,
) -> Result<Correction, CounterError> {
    let fix = true_count
        .checked_sub(sum_without_fix)
        .ok_or(CounterError::Overflow)?;
    let change = fix.checked_sub(current_fix).ok_or(CounterError::Overflow)?;
    Ok(Correction { fix, change })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_read_adds_writers_salts_and_fix() {
        let sum = sum_counter([
            ("w#shardId-000000000000", 120),
            ("w#router-3", 30),
            ("s#0", 4),
            ("s#7", 6),
            ("fix", -2),
            ("settled", 40),
        ])
        .unwrap();
        assert_eq!(
            (sum.writers(), sum.settled(), sum.salted(), sum.fix()),
            (150, 40, 10, -2)
        );
        assert_eq!((sum.total(), sum.without_fix()), (198, 200));
        assert_eq!(sum_counter(Vec::<(String, i64)>::new()).unwrap().total(), 0);
    }

    #[test]
    fn a_read_rejects_an_item_it_does_not_understand() {
        assert_eq!(
            sum_counter([("w#a", 1), ("total", 5)]),
            Err(CounterError::UnknownSortKey("total".into()))
        );
        assert_eq!(
            sum_counter([("w#a", i64::MAX), ("w#b", 1)]),
            Err(CounterError::Overflow)
        );
    }

    #[test]
    fn a_rebuild_makes_up_for_a_lost_flush() {
        // A router crashed with 211 likes in its buffer (docs/counters.md).
        let c = correction(10_000, 9_789, 0).unwrap();
        assert_eq!(
            c,
            Correction {
                fix: 211,
                change: 211
            }
        );
    }

    proptest! {
        #[test]
        fn after_writing_fix_a_read_equals_the_recount(
            truth in -1_000_000i64..1_000_000,
            writers in proptest::collection::vec(-1_000i64..100_000, 0..6),
            salts in proptest::collection::vec(-1_000i64..100_000, 0..6),
            old_fix in -1_000i64..1_000,
        ) {
            let mut items: Vec<(String, i64)> = writers.iter().enumerate()
                .map(|(i, v)| (format!("w#r{i}"), *v)).collect();
            items.extend(salts.iter().enumerate().map(|(i, v)| (format!("s#{i}"), *v)));
            items.push(("fix".into(), old_fix));
            let before = sum_counter(items.clone()).unwrap();
            let c = correction(truth, before.without_fix(), before.fix()).unwrap();
            prop_assert_eq!(c.change, truth - before.total());
            let last = items.len() - 1;
            items[last].1 = c.fix;
            prop_assert_eq!(sum_counter(items).unwrap().total(), truth);
        }
    }
}

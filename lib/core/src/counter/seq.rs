//! `Seq`: a sequence number stored as a fixed-width, zero-padded decimal string.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::CounterError;

/// A stream sequence number or a flush number, stored zero-padded so string order is numeric order.
///
/// Kinesis sequence numbers are decimal strings (56 digits today; the API allows
/// `0|([1-9]\d{0,128})`, up to 129 digits), longer than the 38 digits a DynamoDB number keeps, so
/// they are stored as strings. Zero-padding every value to [`Seq::WIDTH`] digits makes DynamoDB's
/// byte-wise string comparison (`seq < :new` in a condition expression) agree with numeric order.
/// The width is a stored format and never changes: 129 covers the Kinesis API's documented
/// maximum, DynamoDB Streams (at most 40 characters) and every `u64` flush number (20 digits), at a
/// cost of 129 bytes per item.
///
/// The digits are shared: a clone is a reference count, not a copy, so the user records of one
/// KPL aggregate (which all carry its sequence number) hold them once.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Seq(Arc<str>);

impl Seq {
    /// Digits in the stored form; see the type's doc for why 129.
    pub const WIDTH: usize = 129;

    /// Parses a decimal sequence number (leading zeros allowed) into its padded form.
    pub fn parse(input: &str) -> Result<Self, CounterError> {
        if input.is_empty() {
            return Err(CounterError::EmptySeq);
        }
        if !input.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CounterError::SeqNotDecimal(input.to_owned()));
        }
        let significant = input.trim_start_matches('0');
        if significant.len() > Self::WIDTH {
            return Err(CounterError::SeqTooLong {
                digits: significant.len(),
                max: Self::WIDTH,
            });
        }
        let mut padded = String::with_capacity(Self::WIDTH);
        padded.extend(std::iter::repeat_n('0', Self::WIDTH - significant.len()));
        padded.push_str(significant);
        Ok(Self(padded.into()))
    }

    /// The zero sequence number, ordered before every record and every flush.
    pub fn zero() -> Self {
        Self::from_u64(0)
    }

    /// The padded form of a long-lived writer's flush number.
    pub fn from_u64(n: u64) -> Self {
        Self(format!("{n:0width$}", width = Self::WIDTH).into())
    }

    /// The stored form: exactly [`Seq::WIDTH`] ASCII digits, ordered like the number.
    pub fn as_padded(&self) -> &str {
        &self.0
    }

    /// The canonical decimal form (no leading zeros), as Kinesis expects it back in
    /// `GetShardIterator`'s `StartingSequenceNumber`.
    pub fn to_decimal(&self) -> &str {
        let trimmed = self.0.trim_start_matches('0');
        if trimmed.is_empty() { "0" } else { trimmed }
    }

    /// The value as a `u64` when it fits, so a long-lived writer can continue its flush counter.
    pub fn to_u64(&self) -> Option<u64> {
        self.to_decimal().parse().ok()
    }
}

impl From<u64> for Seq {
    fn from(n: u64) -> Self {
        Self::from_u64(n)
    }
}

impl FromStr for Seq {
    type Err = CounterError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for Seq {
    type Error = CounterError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<Seq> for String {
    fn from(seq: Seq) -> Self {
        seq.0.as_ref().to_owned()
    }
}

impl fmt::Display for Seq {
    /// Shows the canonical decimal form; use [`Seq::as_padded`] for the stored form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.to_decimal())
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.to_decimal())
    }
}

/// Flush numbers of a long-lived writer: strictly increasing, and above every seq read back.
///
/// A restarted writer starts again from 0, but its sub-keys may hold seqs from an earlier life; a
/// new flush numbered at or below a stored seq would be taken for an applied one and lost. Call
/// [`FlushCounter::observe`] with every stored seq read back before taking [`FlushCounter::next_seq`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushCounter {
    last: u64,
}

impl FlushCounter {
    /// A counter whose first flush is number 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the counter so the next flush number is above a seq read back from the store.
    pub fn observe(&mut self, stored: &Seq) -> Result<(), CounterError> {
        let value = stored.to_u64().ok_or(CounterError::Overflow)?;
        self.last = self.last.max(value);
        Ok(())
    }

    /// The last flush number handed out (0 before the first).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The next flush number, strictly above every one handed out or observed.
    pub fn next_seq(&mut self) -> Result<Seq, CounterError> {
        self.last = self.last.checked_add(1).ok_or(CounterError::Overflow)?;
        Ok(Seq::from_u64(self.last))
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use proptest::prelude::*;

    use super::*;

    /// Numeric order of two decimal strings, computed without `Seq`: fewer significant digits is
    /// smaller, equal lengths compare digit by digit.
    fn numeric_cmp(a: &str, b: &str) -> Ordering {
        let a = a.trim_start_matches('0');
        let b = b.trim_start_matches('0');
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }

    /// Decimal strings of 1..=WIDTH digits, biased towards shared prefixes and leading zeros.
    fn decimal() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9]{1,129}",
            "0{0,5}[1-9][0-9]{0,20}",
            "495903382714902566085596925[0-9]{0,29}",
            (0u64..1000).prop_map(|n| n.to_string()),
        ]
    }

    proptest! {
        #[test]
        fn padded_string_order_is_numeric_order(a in decimal(), b in decimal()) {
            let (sa, sb) = (Seq::parse(&a).unwrap(), Seq::parse(&b).unwrap());
            prop_assert_eq!(sa.as_padded().cmp(sb.as_padded()), numeric_cmp(&a, &b));
            prop_assert_eq!(sa.cmp(&sb), numeric_cmp(&a, &b));
            if a.len() <= 38 && b.len() <= 38 {
                let (na, nb) = (a.parse::<u128>().unwrap(), b.parse::<u128>().unwrap());
                prop_assert_eq!(sa.cmp(&sb), na.cmp(&nb));
            }
        }

        #[test]
        fn a_seq_round_trips_through_every_form(a in decimal()) {
            let seq = Seq::parse(&a).unwrap();
            prop_assert_eq!(seq.as_padded().len(), Seq::WIDTH);
            prop_assert_eq!(Seq::parse(seq.as_padded()).unwrap(), seq.clone());
            prop_assert_eq!(Seq::parse(seq.to_decimal()).unwrap(), seq.clone());
            prop_assert_eq!(numeric_cmp(seq.to_decimal(), &a), Ordering::Equal);
            // serde goes through these two conversions (`try_from`/`into = "String"`).
            let stored = String::from(seq.clone());
            prop_assert_eq!(&stored, seq.as_padded());
            prop_assert_eq!(Seq::try_from(stored).unwrap(), seq);
        }

        #[test]
        fn flush_numbers_order_like_u64(a: u64, b: u64) {
            prop_assert_eq!(Seq::from(a).cmp(&Seq::from(b)), a.cmp(&b));
            prop_assert_eq!(Seq::from(a).to_u64(), Some(a));
        }
    }

    #[test]
    fn a_malformed_seq_is_a_typed_error() {
        assert_eq!(Seq::parse(""), Err(CounterError::EmptySeq));
        assert_eq!(
            Seq::parse("12a4"),
            Err(CounterError::SeqNotDecimal("12a4".into()))
        );
        assert_eq!(
            Seq::parse("-1"),
            Err(CounterError::SeqNotDecimal("-1".into()))
        );
        assert_eq!(
            Seq::parse(" 1"),
            Err(CounterError::SeqNotDecimal(" 1".into()))
        );
        let too_long = "1".repeat(Seq::WIDTH + 1);
        assert_eq!(
            Seq::parse(&too_long),
            Err(CounterError::SeqTooLong {
                digits: Seq::WIDTH + 1,
                max: Seq::WIDTH
            })
        );
        // Leading zeros beyond the width are accepted: the value still fits.
        let padded_more = format!("00{}", "9".repeat(Seq::WIDTH));
        assert!(Seq::parse(&padded_more).is_ok());
    }

    #[test]
    fn a_real_kinesis_sequence_number_fits_and_displays_unpadded() {
        let raw = "49590338271490256608559692538361571095921575989136588898";
        let seq = Seq::parse(raw).unwrap();
        assert_eq!(seq.to_string(), raw);
        assert_eq!(seq.to_u64(), None);
        assert!(seq > Seq::from(u64::MAX));
        assert_eq!(Seq::zero().to_decimal(), "0");
    }

    #[test]
    fn a_restarted_writer_numbers_its_flushes_above_what_it_reads_back() {
        let mut counter = FlushCounter::new();
        counter.observe(&Seq::from(41)).unwrap();
        counter.observe(&Seq::from(7)).unwrap();
        assert_eq!(counter.next_seq().unwrap(), Seq::from(42));
        assert_eq!(counter.next_seq().unwrap(), Seq::from(43));
        let huge = Seq::parse("49590338271490256608559692538361571095921575989136588898").unwrap();
        assert_eq!(counter.observe(&huge), Err(CounterError::Overflow));
        let mut full = FlushCounter::new();
        full.observe(&Seq::from(u64::MAX)).unwrap();
        assert_eq!(full.next_seq(), Err(CounterError::Overflow));
    }
}

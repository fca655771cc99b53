//! Parked batches: the record Lambda sends to a stream mapping's on-failure destination when it
//! gives up on a batch, read into what a redrive needs ([`ParkedBatch::parse`]).
//!
//! A batch that fails every retry (or outlives the mapping's maximum record age) is *parked*:
//! Lambda moves on and sends a record naming the shard and the sequence range it skipped to the
//! on-failure destination (`KinesisBatchInfo` or `DDBStreamBatchInfo`), not the records
//! themselves. Its changes were never counted. While they are within the stream's retention a
//! redrive reads them back from the stream and asks the repair to check the (counter, bucket)
//! of each ([`Check`](super::Check)); the recount is the truth, so nothing is counted twice
//! whatever the parked batch had flushed before it failed.
//!
//! Bounds (the record comes from outside): at most [`MAX_PARKED_BYTES`] (an SQS message's
//! limit), a shard id of at most 256 characters, sequence numbers as [`Seq`](super::Seq) parses
//! them, a batch of at most [`MAX_PARKED_BATCH`] records, timestamps as RFC 3339 in UTC; anything else
//! is a [`ParkedError`], never a panic.
//!
//! ```
//! use heatsink_core::counter::{ParkedBatch, ParkedSource};
//! let record = r#"{"version": "1.0", "timestamp": "2026-12-05T10:00:09.717Z",
//!   "requestContext": {"condition": "RetryAttemptsExhausted"},
//!   "KinesisBatchInfo": {"shardId": "shardId-000000000001",
//!     "startSequenceNumber": "4960118965842235937883629852", "endSequenceNumber": "4960118965842235937883629890",
//!     "approximateArrivalOfFirstRecord": "2026-12-05T10:00:01.016Z",
//!     "approximateArrivalOfLastRecord": "2026-12-05T10:00:02.5Z", "batchSize": 500,
//!     "streamArn": "arn:aws:kinesis:us-east-1:123456789012:stream/p-like-events"}}"#;
//! let parked = ParkedBatch::parse(record.as_bytes())?;
//! assert_eq!(parked.source, ParkedSource::Kinesis);
//! assert_eq!(parked.shard_id, "shardId-000000000001");
//! assert_eq!(parked.batch_size, 500);
//! assert_eq!(parked.first_arrival_ms, Some(1_796_464_801_016));
//! # Ok::<(), heatsink_core::counter::ParkedError>(())
//! ```

use serde::Deserialize;

use super::Seq;

/// Largest on-failure record read (an SQS message holds at most 256 KiB).
pub const MAX_PARKED_BYTES: usize = 256 * 1024;
/// Largest batch a record may name (a Kinesis or DynamoDB Streams mapping's batch size is at
/// most 10,000).
pub const MAX_PARKED_BATCH: u32 = 10_000;
const MAX_SHARD_ID: usize = 256;

/// Which stream a parked batch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParkedSource {
    /// A Kinesis data stream (`KinesisBatchInfo`).
    Kinesis,
    /// A DynamoDB stream (`DDBStreamBatchInfo`).
    DynamoDbStreams,
}

/// One parked batch: the shard and sequence range Lambda skipped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ParkedBatch {
    /// Kinesis or DynamoDB Streams.
    pub source: ParkedSource,
    /// The stream's ARN.
    pub stream_arn: String,
    /// The shard.
    pub shard_id: String,
    /// The first record skipped.
    pub start_seq: Seq,
    /// The last record skipped.
    pub end_seq: Seq,
    /// Records in the batch.
    pub batch_size: u32,
    /// When the first record reached the stream (Unix ms), if the record says.
    pub first_arrival_ms: Option<u64>,
    /// Why Lambda gave up (`RetryAttemptsExhausted`, `RecordAgeExceeded`, …), if it says.
    pub condition: Option<String>,
}

/// Why an on-failure record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParkedError {
    /// Larger than [`MAX_PARKED_BYTES`].
    #[error("the record is {0} bytes, more than the {MAX_PARKED_BYTES} an on-failure record has")]
    TooLarge(usize),
    /// Not JSON of the on-failure shape.
    #[error("not an on-failure record: {0}")]
    Shape(String),
    /// Neither `KinesisBatchInfo` nor `DDBStreamBatchInfo` (or both).
    #[error("the record names no stream batch (KinesisBatchInfo or DDBStreamBatchInfo)")]
    NoBatch,
    /// A field is out of its bounds.
    #[error("{field}: {reason}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "requestContext", default)]
    request_context: Option<RawContext>,
    #[serde(rename = "KinesisBatchInfo", default)]
    kinesis: Option<RawBatch>,
    #[serde(rename = "DDBStreamBatchInfo", default)]
    dynamodb: Option<RawBatch>,
}

#[derive(Deserialize)]
struct RawContext {
    #[serde(default)]
    condition: Option<String>,
}

#[derive(Deserialize)]
struct RawBatch {
    #[serde(rename = "shardId")]
    shard_id: String,
    #[serde(rename = "startSequenceNumber")]
    start: String,
    #[serde(rename = "endSequenceNumber")]
    end: String,
    #[serde(rename = "approximateArrivalOfFirstRecord", default)]
    first_arrival: Option<String>,
    #[serde(rename = "batchSize")]
    batch_size: u64,
    #[serde(rename = "streamArn")]
    stream_arn: String,
}

impl ParkedBatch {
    /// Reads an on-failure record (see the module docs for the bounds).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParkedError> {
        if bytes.len() > MAX_PARKED_BYTES {
            return Err(ParkedError::TooLarge(bytes.len()));
        }
        let raw: Raw =
            serde_json::from_slice(bytes).map_err(|e| ParkedError::Shape(e.to_string()))?;
        let (source, b) = match (raw.kinesis, raw.dynamodb) {
            (Some(b), None) => (ParkedSource::Kinesis, b),
            (None, Some(b)) => (ParkedSource::DynamoDbStreams, b),
            _ => return Err(ParkedError::NoBatch),
        };
        let field = |field: &'static str, reason: String| ParkedError::Field { field, reason };
        if b.shard_id.is_empty()
            || b.shard_id.len() > MAX_SHARD_ID
            || b.shard_id.chars().any(char::is_control)
        {
            return Err(field(
                "shardId",
                format!("must be 1 to {MAX_SHARD_ID} printable characters"),
            ));
        }
        if b.stream_arn.len() > 2_048 || !b.stream_arn.starts_with("arn:") {
            return Err(field("streamArn", "is not an ARN".into()));
        }
        let start =
            Seq::parse(&b.start).map_err(|e| field("startSequenceNumber", e.to_string()))?;
        let end = Seq::parse(&b.end).map_err(|e| field("endSequenceNumber", e.to_string()))?;
        if end < start {
            return Err(field(
                "endSequenceNumber",
                "is before startSequenceNumber".into(),
            ));
        }
        let batch_size = u32::try_from(b.batch_size)
            .ok()
            .filter(|n| (1..=MAX_PARKED_BATCH).contains(n))
            .ok_or_else(|| field("batchSize", format!("must be 1 to {MAX_PARKED_BATCH}")))?;
        let first_arrival_ms = match b.first_arrival {
            None => None,
            Some(t) => Some(rfc3339_ms(&t).ok_or_else(|| {
                field(
                    "approximateArrivalOfFirstRecord",
                    format!("{t:?} is not a UTC time"),
                )
            })?),
        };
        Ok(Self {
            source,
            stream_arn: b.stream_arn,
            shard_id: b.shard_id,
            start_seq: start,
            end_seq: end,
            batch_size,
            first_arrival_ms,
            condition: raw
                .request_context
                .and_then(|c| c.condition)
                .filter(|c| c.len() <= 64),
        })
    }

    /// The on-failure record Lambda would send for this batch (what the local event-source
    /// mapping writes when it parks one, and what tests feed a redrive).
    pub fn to_record(&self) -> serde_json::Value {
        let info = serde_json::json!({
            "shardId": self.shard_id,
            "startSequenceNumber": self.start_seq.to_decimal(),
            "endSequenceNumber": self.end_seq.to_decimal(),
            "approximateArrivalOfFirstRecord": self.first_arrival_ms.map(ms_rfc3339),
            "approximateArrivalOfLastRecord": self.first_arrival_ms.map(ms_rfc3339),
            "batchSize": self.batch_size,
            "streamArn": self.stream_arn,
        });
        let key = match self.source {
            ParkedSource::Kinesis => "KinesisBatchInfo",
            ParkedSource::DynamoDbStreams => "DDBStreamBatchInfo",
        };
        serde_json::json!({
            "version": "1.0",
            "requestContext": {"condition": self.condition.clone().unwrap_or_else(|| "RetryAttemptsExhausted".into())},
            key: info,
        })
    }
}

/// Reading a parked batch's records back from its shard: which records are the batch's, and
/// when the read has *proven* it saw all of them.
///
/// A read starts `AT_SEQUENCE_NUMBER` the batch's first record and feeds each record's sequence
/// number to [`RangeRead::take`] in shard order, and [`RangeRead::shard_ended`] when the shard
/// has no more pages (closed and read to its end). It is [`RangeOutcome::Complete`] only on
/// proof: a record at or after the batch's last sequence number was read, or the shard ended. If
/// the first record read is after the batch's first, the stream no longer holds the start (past
/// its retention, or trimmed): [`RangeOutcome::Gap`], and the batch's counters cannot be named
/// from the stream. Anything else (an empty page at the tip, a deadline) is
/// [`RangeOutcome::Unfinished`]: never read as done.
///
/// ```
/// use heatsink_core::counter::{ParkedBatch, ParkedSource, RangeOutcome, RangeRead, Seq};
/// let batch = ParkedBatch {
///     source: ParkedSource::Kinesis,
///     stream_arn: "arn:aws:kinesis:us-east-1:1:stream/like-events".into(),
///     shard_id: "shardId-000000000000".into(),
///     start_seq: Seq::from(10),
///     end_seq: Seq::from(30),
///     batch_size: 3,
///     first_arrival_ms: None,
///     condition: None,
/// };
/// let mut read = RangeRead::new(&batch);
/// assert!(read.take(&Seq::from(10)) && read.take(&Seq::from(20)));
/// assert_eq!(read.outcome(), RangeOutcome::Unfinished); // 30 not read yet
/// assert!(read.take(&Seq::from(30)) && !read.take(&Seq::from(40)));
/// assert_eq!(read.outcome(), RangeOutcome::Complete);
/// assert_eq!(read.taken(), 3);
/// ```
#[derive(Debug, Clone)]
pub struct RangeRead {
    start: Seq,
    end: Seq,
    first: Option<Seq>,
    reached_end: bool,
    ended: bool,
    taken: u32,
}

/// What a [`RangeRead`] proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Every record of the batch the shard holds was read: the last one, or the shard's end.
    Complete,
    /// The shard no longer holds the batch's first record (`first_read`: the first record it
    /// did hold, if any): some of the batch's changes cannot be read back.
    Gap {
        /// The first record the read saw, after the batch's start.
        first_read: Option<Seq>,
    },
    /// Neither proof yet: read on (the batch's records may still be behind the tip).
    Unfinished,
}

impl RangeRead {
    /// A read of `batch`'s range, nothing seen yet.
    pub fn new(batch: &ParkedBatch) -> Self {
        Self {
            start: batch.start_seq.clone(),
            end: batch.end_seq.clone(),
            first: None,
            reached_end: false,
            ended: false,
            taken: 0,
        }
    }

    /// The next record of the shard, in order: `true` when it is one of the batch's. A record
    /// after the batch's last ends the read.
    pub fn take(&mut self, seq: &Seq) -> bool {
        if self.first.is_none() {
            self.first = Some(seq.clone());
        }
        if *seq < self.start || (self.reached_end && *seq > self.end) {
            return false;
        }
        if *seq >= self.end {
            self.reached_end = true;
        }
        if *seq > self.end {
            return false;
        }
        self.taken = self.taken.saturating_add(1);
        true
    }

    /// The shard has no records after the last one taken (closed and read to its end).
    pub fn shard_ended(&mut self) {
        self.ended = true;
    }

    /// Whether reading on can change nothing: the last record or the shard's end was reached.
    pub fn done(&self) -> bool {
        self.reached_end || self.ended
    }

    /// Records of the batch read so far.
    pub fn taken(&self) -> u32 {
        self.taken
    }

    /// What the read has proven so far.
    pub fn outcome(&self) -> RangeOutcome {
        match &self.first {
            Some(first) if *first > self.start => RangeOutcome::Gap {
                first_read: Some(first.clone()),
            },
            None if self.ended => RangeOutcome::Gap { first_read: None },
            _ if self.done() => RangeOutcome::Complete,
            _ => RangeOutcome::Unfinished,
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DDTHH:MM:SS[.fff…]Z` as Unix ms; `None` for anything else (other offsets included).
fn rfc3339_ms(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    if b.len() < 20 || b.len() > 40 || *b.last()? != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = t.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let frac = &t[19..t.len() - 1];
    let ms = match frac.strip_prefix('.') {
        None if frac.is_empty() => 0,
        Some(f) if !f.is_empty() && f.bytes().all(|c| c.is_ascii_digit()) => {
            let f3: String = f.chars().chain("000".chars()).take(3).collect();
            f3.parse::<i64>().ok()?
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60 + s;
    u64::try_from(secs.checked_mul(1_000)?.checked_add(ms)?).ok()
}

/// Unix ms as `YYYY-MM-DDTHH:MM:SS.fffZ`.
fn ms_rfc3339(ms: u64) -> String {
    let secs = (ms / 1_000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil_from_days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        ms % 1_000
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ddb_record() -> String {
        r#"{"requestContext": {"requestId": "r1", "condition": "RecordAgeExceeded", "approximateInvokeCount": 3},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0", "timestamp": "2019-11-14T00:13:49.717Z",
            "DDBStreamBatchInfo": {"shardId": "shardId-00000001573689847184-864758bb",
                "startSequenceNumber": "800000000003126276362", "endSequenceNumber": "800000000003126276362",
                "approximateArrivalOfFirstRecord": "2019-11-14T00:13:19Z",
                "approximateArrivalOfLastRecord": "2019-11-14T00:13:19Z", "batchSize": 1,
                "streamArn": "arn:aws:dynamodb:us-east-2:123456789012:table/mytable/stream/2019-11-14T00:04:06.388"}}"#
            .to_owned()
    }

    #[test]
    fn a_dynamodb_streams_record_from_the_lambda_guide_is_read() {
        let p = ParkedBatch::parse(ddb_record().as_bytes()).expect("parses");
        assert_eq!(p.source, ParkedSource::DynamoDbStreams);
        assert_eq!(p.batch_size, 1);
        assert_eq!(p.start_seq, p.end_seq);
        assert_eq!(p.first_arrival_ms, Some(1_573_690_399_000));
        assert_eq!(p.condition.as_deref(), Some("RecordAgeExceeded"));
        // And written back the way Lambda writes it.
        let again = ParkedBatch::parse(p.to_record().to_string().as_bytes()).expect("round trip");
        assert_eq!(again, p);
    }

    #[test]
    fn records_out_of_bounds_are_refused_with_the_field() {
        let bad = |from: &str, to: &str| {
            ParkedBatch::parse(ddb_record().replace(from, to).as_bytes()).expect_err(to)
        };
        assert!(matches!(
            bad("\"batchSize\": 1", "\"batchSize\": 0"),
            ParkedError::Field {
                field: "batchSize",
                ..
            }
        ));
        assert!(matches!(
            bad(
                "\"startSequenceNumber\": \"800000000003126276362\"",
                "\"startSequenceNumber\": \"9x\""
            ),
            ParkedError::Field {
                field: "startSequenceNumber",
                ..
            }
        ));
        assert!(matches!(
            bad("DDBStreamBatchInfo", "Other"),
            ParkedError::NoBatch
        ));
        assert!(matches!(
            bad(
                "2019-11-14T00:13:19Z\",\n                \"approximateArrivalOfLastRecord",
                "2019-11-14T00:13:19+01:00\",\n                \"approximateArrivalOfLastRecord"
            ),
            ParkedError::Field {
                field: "approximateArrivalOfFirstRecord",
                ..
            }
        ));
        assert!(matches!(
            ParkedBatch::parse(&vec![b' '; MAX_PARKED_BYTES + 1]),
            Err(ParkedError::TooLarge(_))
        ));
        assert!(matches!(
            ParkedBatch::parse(b"{"),
            Err(ParkedError::Shape(_))
        ));
    }

    proptest! {
        #[test]
        fn times_round_trip_through_rfc3339(ms in 0u64..8_000_000_000_000) {
            prop_assert_eq!(rfc3339_ms(&ms_rfc3339(ms)), Some(ms));
        }

        /// Fed a shard's records from any position, a range read is complete exactly when it
        /// reached the batch's last record or the shard's end, takes exactly the records inside
        /// the batch, and reports a gap exactly when the shard no longer held the batch's first.
        #[test]
        fn a_range_read_is_complete_only_on_proof(
            mut shard in proptest::collection::btree_set(0u64..200, 0..40),
            a in 0u64..200,
            len in 0u64..60,
            trimmed in 0u64..200,
            ended in any::<bool>(),
            cut in 0usize..50,
        ) {
            let (start, end) = (a, a + len);
            let batch = ParkedBatch {
                source: ParkedSource::Kinesis,
                stream_arn: "arn:aws:kinesis:us-east-1:1:stream/s".into(),
                shard_id: "shardId-000000000000".into(),
                start_seq: Seq::from(start),
                end_seq: Seq::from(end),
                batch_size: 1,
                first_arrival_ms: None,
                condition: None,
            };
            // The stream holds the records from `trimmed` on; the read starts at `start`, sees
            // the first `cut` records at most (a deadline), and the shard's end only when it read
            // every record there is.
            shard.retain(|s| *s >= trimmed);
            let visible: Vec<u64> = shard.iter().copied().filter(|s| *s >= start).collect();
            let mut read = RangeRead::new(&batch);
            let mut taken = vec![];
            for s in visible.iter().take(cut) {
                if read.take(&Seq::from(*s)) {
                    taken.push(*s);
                }
                if read.done() {
                    break;
                }
            }
            let saw_all = cut >= visible.len();
            if ended && saw_all {
                read.shard_ended();
            }
            let expected: Vec<u64> = visible.iter().copied().take(cut).filter(|s| *s <= end).collect();
            prop_assert_eq!(&taken, &expected);
            let first = visible.first().copied().filter(|_| cut > 0);
            let reached = visible.iter().take(cut).any(|s| *s >= end);
            match read.outcome() {
                RangeOutcome::Gap { first_read } => prop_assert!(
                    first.is_some_and(|f| f > start && first_read == Some(Seq::from(f)))
                        || (first.is_none() && ended && saw_all && first_read.is_none())
                ),
                RangeOutcome::Complete => {
                    prop_assert!(first.is_none_or(|f| f <= start));
                    prop_assert!(reached || (ended && saw_all));
                    prop_assert!(first.is_some(), "complete without reading the start");
                    // Proof: every record of the batch the stream holds was taken.
                    let held: Vec<u64> = shard.iter().copied().filter(|s| *s >= start && *s <= end).collect();
                    prop_assert_eq!(&taken, &held);
                }
                RangeOutcome::Unfinished => prop_assert!(!(reached || (ended && saw_all))),
            }
        }

        /// Any bytes: an error or a batch within the bounds, never a panic.
        #[test]
        fn any_bytes_are_read_within_bounds_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(p) = ParkedBatch::parse(&bytes) {
                prop_assert!(p.batch_size >= 1 && p.batch_size <= MAX_PARKED_BATCH);
            }
        }
    }
}

//! The wall clock, in the units DynamoDB items and AWS APIs use.
//!
//! Every module that stamps or compares times (lease expiries, directory entries and their TTL,
//! flush delays, rebuild cut-offs) reads the clock here, so a test or a port to another clock
//! has one place to look. A clock before 1970 reads as 0; one past the year 584 million as
//! `u64::MAX`.

/// Milliseconds since the Unix epoch (lease expiry and creation counters, flush delays).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Seconds since the Unix epoch (the directory's and DynamoDB TTL's unit of time).
pub fn now_secs() -> u64 {
    now_ms() / 1_000
}

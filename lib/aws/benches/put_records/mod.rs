//! The PutRecords loop a careful user writes, shared by the benches that load a stream: one
//! request, then again with only the refused entries after a doubling back-off.

use std::time::Duration;

use aws_sdk_kinesis::types::PutRecordsRequestEntry;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One PutRecords of `entries`, again with only the refused entries (doubling back-off from
/// 50 ms, at most 12 attempts): the loop a careful user writes.
pub async fn put_with_retry(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    mut entries: Vec<PutRecordsRequestEntry>,
) -> Result<u64, BoxError> {
    let mut backoff = Duration::from_millis(50);
    for attempt in 1..=12u64 {
        let out = k
            .put_records()
            .stream_name(stream)
            .set_records(Some(entries.clone()))
            .send()
            .await?;
        if out.failed_record_count().unwrap_or(0) == 0 {
            return Ok(attempt);
        }
        entries = out
            .records()
            .iter()
            .zip(entries)
            .filter(|(r, _)| r.error_code().is_some())
            .map(|(_, e)| e)
            .collect();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
    Err(format!("{} records still refused after 12 attempts", entries.len()).into())
}

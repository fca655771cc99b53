//! `DeadLetter`: where a batch goes when skipping it is preferred to stalling its shard.
//!
//! By default a batch that keeps failing is retried (capped back-off) until it succeeds or the
//! lease is lost, and its shard is reported stalled; nothing is checkpointed past it. A worker
//! given a dead-letter sink ([`super::Worker::dead_letter`]) instead hands a batch that failed
//! [`super::WorkerConfig::max_attempts`] times to the sink, and only once the sink has taken
//! it, checkpoints past it. A sink that fails leaves the shard stalled, never skipped.
//!
//! [`SqsDeadLetter`] sends each record as one SQS message (`SendMessageBatch`, 10 a call):
//! `{"stream", "shard", "seq", "sub_seq"?, "partition_key", "data", "data_encoding", "error"}`.
//! A record whose message would exceed SQS's size limit (256 KiB by default) is refused by SQS,
//! so the batch stays where it is (stalled) rather than being lost.

use std::future::Future;
use std::pin::Pin;

use super::{ProcessBatch, StreamError};

/// A boxed future of a [`DeadLetter`] send.
pub type DeadLetterFuture<'a> = Pin<Box<dyn Future<Output = Result<(), StreamError>> + Send + 'a>>;

/// Takes a batch the processor could not handle, before the worker checkpoints past it.
pub trait DeadLetter: Send + Sync + 'static {
    /// Stores `batch` (which failed with `error`) durably; `Ok` lets the worker skip it.
    fn send<'a>(&'a self, batch: &'a ProcessBatch, error: &'a StreamError) -> DeadLetterFuture<'a>;
}

/// A dead-letter SQS queue: one message per record.
#[derive(Clone, Debug)]
pub struct SqsDeadLetter {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    stream: String,
}

impl SqsDeadLetter {
    /// Records of `stream` (named in each message) go to the queue at `queue_url`.
    pub fn new(
        client: aws_sdk_sqs::Client,
        queue_url: impl Into<String>,
        stream: impl Into<String>,
    ) -> Self {
        Self {
            // No call waits forever: a client without a bound of its own gets the policy's.
            client: crate::timeouts::bounded!(aws_sdk_sqs, client, crate::timeouts::Timeouts::CALL),
            queue_url: queue_url.into(),
            stream: stream.into(),
        }
    }

    /// The messages of `batch`, in order.
    fn messages(&self, batch: &ProcessBatch, error: &StreamError) -> Vec<String> {
        batch
            .records
            .iter()
            .map(|r| {
                let mut doc = r.to_json(&batch.shard_id);
                if let Some(map) = doc.as_object_mut() {
                    map.insert("stream".to_owned(), self.stream.clone().into());
                    map.insert("error".to_owned(), error.to_string().into());
                }
                doc.to_string()
            })
            .collect()
    }

    async fn send_all(&self, batch: &ProcessBatch, error: &StreamError) -> Result<(), StreamError> {
        use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
        let messages = self.messages(batch, error);
        for (n, chunk) in messages.chunks(10).enumerate() {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, body)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(format!("r{}", n * 10 + i))
                        .message_body(body)
                        .build()
                        .map_err(|e| StreamError::Processor(Box::new(e)))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    StreamError::from_sdk("SQS", "SendMessageBatch", &self.queue_url, e)
                })?;
            if let Some(first) = out.failed().first() {
                return Err(StreamError::DeadLetterRefused {
                    queue: self.queue_url.clone(),
                    failed: out.failed().len(),
                    first: format!("{}: {}", first.code(), first.message().unwrap_or("")),
                });
            }
        }
        Ok(())
    }
}

impl DeadLetter for SqsDeadLetter {
    fn send<'a>(&'a self, batch: &'a ProcessBatch, error: &'a StreamError) -> DeadLetterFuture<'a> {
        Box::pin(self.send_all(batch, error))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
    use aws_sdk_sqs::types::BatchResultErrorEntry;
    use aws_smithy_mocks::mock;
    use bytes::Bytes;

    use super::*;
    use crate::stream::StreamRecord;

    fn batch(n: u64) -> ProcessBatch {
        ProcessBatch {
            shard_id: "shardId-000000000001".into(),
            token: 3,
            records: (0..n)
                .map(|i| StreamRecord {
                    seq: heatsink_core::counter::Seq::from(100 + i),
                    sub_seq: None,
                    partition_key: format!("k{i}").into(),
                    data: Bytes::from(vec![0xff, i as u8]),
                    undecodable: None,
                })
                .collect(),
        }
    }

    #[tokio::test]
    async fn smithy_mock_sqs_dead_letter_sends_every_record_in_batches_of_ten_and_reports_refusals()
    {
        let ok = mock!(aws_sdk_sqs::Client::send_message_batch)
            .match_requests(|r| {
                r.queue_url() == Some("q")
                    && r.entries().len() <= 10
                    && r.entries().iter().all(|e| {
                        let doc: serde_json::Value =
                            serde_json::from_str(e.message_body()).unwrap_or_default();
                        doc["data_encoding"] == "base64"
                            && doc["stream"] == "s"
                            && doc["error"].as_str().is_some_and(|m| m.contains("boom"))
                    })
            })
            .then_output(|| {
                SendMessageBatchOutput::builder()
                    .set_successful(Some(Vec::new()))
                    .set_failed(Some(Vec::new()))
                    .build()
                    .unwrap()
            });
        let sqs = crate::mocked!(aws_sdk_sqs, ok);
        let error = StreamError::Processor("boom".into());
        SqsDeadLetter::new(sqs, "q", "s")
            .send(&batch(23), &error)
            .await
            .expect("sent");
        assert_eq!(ok.num_calls(), 3, "23 records in 3 calls of at most 10");

        let refused = mock!(aws_sdk_sqs::Client::send_message_batch).then_output(|| {
            SendMessageBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .failed(
                    BatchResultErrorEntry::builder()
                        .id("r1")
                        .sender_fault(true)
                        .code("InvalidParameterValue")
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap()
        });
        let sqs = crate::mocked!(aws_sdk_sqs, refused);
        let err = SqsDeadLetter::new(sqs, "q", "s")
            .send(&batch(2), &error)
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, StreamError::DeadLetterRefused { failed: 1, .. }),
            "{err:?}"
        );
    }
}

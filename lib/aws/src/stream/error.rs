//! `StreamError`: what can go wrong reading a stream, moving a lease or running a processor.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use crate::error::AwsError;

/// Errors of the stream adapters, named for what the caller can do about them.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The service throttled the call (ProvisionedThroughputExceeded, LimitExceeded, …): back off.
    #[error("{} throttled {} on {}", .0.service(), .0.operation(), .0.resource())]
    Throttled(#[source] AwsError),
    /// The shard iterator expired (5 minutes unused): get a new one after the last checkpoint.
    #[error("shard iterator expired on {}", .0.resource())]
    ExpiredIterator(#[source] AwsError),
    /// The records asked for were trimmed past retention: restart at TRIM_HORIZON.
    #[error("records of {} were trimmed past retention", .0.resource())]
    Trimmed(#[source] AwsError),
    /// The stream, shard or table does not exist (deleted, or trimmed past retention).
    #[error("{resource} not found")]
    NotFound {
        /// Stream, shard or table.
        resource: String,
        /// The service's `ResourceNotFoundException`; `None` when an answer lacked what was
        /// asked for (GetShardIterator without an iterator).
        #[source]
        source: Option<AwsError>,
    },
    /// Someone else changed the lease since it was read: re-read it, never retry blindly.
    #[error("lease of {shard_id:?} changed under us (conditional write failed)")]
    LeaseConflict {
        /// The shard.
        shard_id: String,
    },
    /// A lease row cannot be read back; the worker recreates it from the shard graph.
    #[error("lease row of {shard_id:?} is malformed: {reason}")]
    MalformedLease {
        /// The shard (empty if even that is missing).
        shard_id: String,
        /// The first problem found.
        reason: String,
    },
    /// A record's sequence number is not decimal (the source broke its contract).
    #[error("sequence number {0:?} is not a decimal number")]
    InvalidSequence(String),
    /// The pure core refused the change (illegal transition, lease held or lost, bad graph).
    #[error(transparent)]
    Core(#[from] heatsink_core::stream::StreamError),
    /// A processor's write was refused by its fence: a newer lease holder owns the shard. The
    /// worker stops the shard at once and does not retry.
    #[error("write fenced out: token {token} is older than the item's fence")]
    Fenced {
        /// The refused fencing token.
        token: u64,
    },
    /// The record processor failed; the worker retries the batch a bounded number of times.
    #[error("record processor failed: {0}")]
    Processor(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The record processor cannot deliver anything any more (its output is gone: a closed
    /// stdout, a deleted destination). The worker stops at once without checkpointing the batch,
    /// releases its leases, and `Worker::run` returns this error.
    #[error("record processor cannot deliver: {0}")]
    Abort(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A lease row of the application belongs to another stream (another stream with the same
    /// application name, or a deleted and recreated stream of the same name): its checkpoint
    /// means nothing here, so the worker refuses to start rather than resume from it.
    #[error(
        "lease row {shard_id:?} of application {app:?} belongs to stream {found}, not {expected}: \
         use another application name, or delete the application's lease rows to start over"
    )]
    ForeignLease {
        /// The application.
        app: String,
        /// The row's shard.
        shard_id: String,
        /// The stream identity the row names.
        found: String,
        /// This worker's stream identity (ARN and creation time).
        expected: String,
    },
    /// A lease row names no stream: it was written before lease rows recorded their stream, so
    /// its checkpoint may be another stream's. The worker refuses it rather than guess.
    #[error(
        "lease row {shard_id:?} of application {app:?} names no stream (written by an older \
         heatsink), so its checkpoint may be another stream's: delete the application's lease \
         rows to start over (from the initial position), or use another application name"
    )]
    UnnamedLease {
        /// The application.
        app: String,
        /// The row's shard.
        shard_id: String,
    },
    /// The dead-letter queue refused some of a batch's records: the batch is not skipped.
    #[error("dead-letter queue {queue} refused {failed} record(s): {first}")]
    DeadLetterRefused {
        /// The queue URL.
        queue: String,
        /// Records refused.
        failed: usize,
        /// The first refusal's code and message.
        first: String,
    },
    /// The source cannot do what was asked (AT_TIMESTAMP on DynamoDB Streams).
    #[error("{source_kind} does not support {what}")]
    Unsupported {
        /// The source.
        source_kind: &'static str,
        /// What it lacks.
        what: &'static str,
    },
    /// Any other AWS failure (network, validation, access): retried on the next round.
    #[error(transparent)]
    Aws(AwsError),
}

/// Classifies a failed call by its error code (what `from_sdk` does for an SDK error): throttling,
/// an expired iterator, trimmed records and a missing resource get their own variants, each
/// keeping the [`AwsError`] as its source; anything else is [`StreamError::Aws`].
impl From<AwsError> for StreamError {
    fn from(err: AwsError) -> Self {
        if err.is_throttling() {
            Self::Throttled(err)
        } else if err.code() == Some("ExpiredIteratorException") {
            Self::ExpiredIterator(err)
        } else if err.code() == Some("TrimmedDataAccessException") {
            Self::Trimmed(err)
        } else if err.is_not_found() {
            Self::NotFound {
                resource: err.resource().to_owned(),
                source: Some(err),
            }
        } else {
            Self::Aws(err)
        }
    }
}

impl StreamError {
    /// Maps `service`'s failed `operation` on `resource` to the variant the caller can act on,
    /// by its error code; the SDK error is kept whole as the [`AwsError`] inside.
    pub(crate) fn from_sdk<E, R>(
        service: &'static str,
        operation: &'static str,
        resource: &str,
        err: SdkError<E, R>,
    ) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        AwsError::new(service, operation, resource, err).into()
    }

    /// The failed AWS call behind this error, if it is one.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Throttled(e) | Self::ExpiredIterator(e) | Self::Trimmed(e) | Self::Aws(e) => {
                Some(e)
            }
            Self::NotFound { source, .. } => source.as_ref(),
            _ => None,
        }
    }

    /// True for errors worth retrying after a pause (throttling, network, unknown failures).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Throttled(_) | Self::Aws(_))
    }

    /// True when the worker no longer holds the lease and must stop the shard.
    pub fn is_lease_lost(&self) -> bool {
        matches!(
            self,
            Self::LeaseConflict { .. }
                | Self::Fenced { .. }
                | Self::Core(heatsink_core::stream::StreamError::LeaseLost { .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::in_chain;
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ResourceNotFoundException,
    };
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::testing::mocked;

    use crate::testing::error_meta as meta;

    async fn update_failing_with(err: fn() -> UpdateItemError) -> StreamError {
        let update = mock!(aws_sdk_dynamodb::Client::update_item).then_error(err);
        let ddb =
            mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled()); update);
        let out = ddb.update_item().table_name("t-leases").send().await;
        out.map_err(|e| StreamError::from_sdk("DynamoDB", "UpdateItem", "t-leases", e))
            .expect_err("mocked to fail")
    }

    #[tokio::test]
    async fn dynamodb_failures_are_classified_and_keep_the_sdk_error() {
        let err = update_failing_with(|| {
            UpdateItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .meta(meta("ResourceNotFoundException"))
                    .build(),
            )
        })
        .await;
        assert!(
            matches!(&err, StreamError::NotFound { resource, source: Some(_) } if resource == "t-leases"),
            "{err:?}"
        );
        assert!(err.aws().is_some_and(AwsError::is_not_found));
        assert!(in_chain::<SdkError<UpdateItemError, HttpResponse>>(&err).is_some());

        let err = update_failing_with(|| {
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(meta("ConditionalCheckFailedException"))
                    .build(),
            )
        })
        .await;
        assert!(matches!(err, StreamError::Aws(_)), "{err:?}");
        assert!(
            err.is_transient(),
            "as before: any other AWS failure is retried"
        );
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_conditional_check_failed());
        assert!(!aws.is_throttling());
        assert_eq!(aws.operation(), "UpdateItem");
        let sdk = in_chain::<SdkError<UpdateItemError, HttpResponse>>(&err)
            .expect("the SDK error is in the source chain");
        assert!(
            sdk.as_service_error()
                .is_some_and(UpdateItemError::is_conditional_check_failed_exception)
        );
    }
}

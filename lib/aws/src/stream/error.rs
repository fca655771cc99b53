//! `StreamError`: what can go wrong reading a stream, moving a lease or running a processor.

use aws_sdk_dynamodb::error::ProvideErrorMetadata;

use crate::error::describe;

/// Errors of the stream adapters, named for what the caller can do about them.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The service throttled the call (ProvisionedThroughputExceeded, LimitExceeded, …): back off.
    #[error("{service} throttled the call on {resource}: {message}")]
    Throttled {
        /// `kinesis`, `dynamodbstreams` or `dynamodb`.
        service: &'static str,
        /// Stream, shard or table.
        resource: String,
        /// The SDK error with its cause chain.
        message: String,
    },
    /// The shard iterator expired (5 minutes unused): get a new one after the last checkpoint.
    #[error("shard iterator expired on {resource}")]
    ExpiredIterator {
        /// Stream or shard.
        resource: String,
    },
    /// The records asked for were trimmed past retention: restart at TRIM_HORIZON.
    #[error("records of {resource} were trimmed past retention")]
    Trimmed {
        /// Stream or shard.
        resource: String,
    },
    /// The stream, shard or table does not exist (deleted, or trimmed past retention).
    #[error("{service}: {resource} not found: {message}")]
    NotFound {
        /// The service that said so.
        service: &'static str,
        /// Stream, shard or table.
        resource: String,
        /// The SDK error with its cause chain.
        message: String,
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
    /// Any other AWS failure (network, validation, access): retried on the next round.
    #[error("{service} call on {resource} failed: {message}")]
    Call {
        /// The service.
        service: &'static str,
        /// Stream, shard or table.
        resource: String,
        /// The SDK error with its cause chain.
        message: String,
    },
}

impl StreamError {
    /// Maps an SDK error to the variant the caller can act on, by its error code.
    pub(crate) fn from_sdk<E>(service: &'static str, resource: &str, err: E) -> Self
    where
        E: std::error::Error + ProvideErrorMetadata,
    {
        let resource = resource.to_owned();
        match err.code() {
            Some(
                "ProvisionedThroughputExceededException"
                | "LimitExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "KMSThrottlingException",
            ) => Self::Throttled {
                service,
                resource,
                message: describe(&err),
            },
            Some("ExpiredIteratorException") => Self::ExpiredIterator { resource },
            Some("TrimmedDataAccessException") => Self::Trimmed { resource },
            Some("ResourceNotFoundException") => Self::NotFound {
                service,
                resource,
                message: describe(&err),
            },
            _ => Self::Call {
                service,
                resource,
                message: describe(&err),
            },
        }
    }

    /// True for errors worth retrying after a pause (throttling, network, unknown failures).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Throttled { .. } | Self::Call { .. })
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

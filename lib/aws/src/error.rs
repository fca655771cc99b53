//! Error types shared by the AWS adapters.
//!
//! Each area has one `thiserror` enum whose variants say what the caller can do; SDK errors are
//! flattened to a message with their whole cause chain (the SDK's own `Display` shows only the
//! outermost layer, e.g. "service error", which tells an operator nothing).

use std::time::Duration;

use aws_sdk_dynamodb::error::DisplayErrorContext;

/// Renders an error with its full source chain on one line.
pub fn describe<E: std::error::Error>(e: &E) -> String {
    DisplayErrorContext(e).to_string()
}

/// Errors from creating and checking the tables and streams of [`crate::schema`].
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A resource exists with a different shape; it was left alone. Delete it or use another prefix.
    #[error(
        "{resource} exists but does not match heatsink's schema: {detail} (left unchanged; delete it or choose another prefix)"
    )]
    Mismatch {
        /// Table or stream name.
        resource: String,
        /// The first difference found.
        detail: String,
    },
    /// A resource did not become ACTIVE in time.
    #[error("{resource} did not become ACTIVE within {waited:?}")]
    Timeout {
        /// Table or stream name.
        resource: String,
        /// How long we waited.
        waited: Duration,
    },
    /// A definition could not be turned into a request (a bug in the schema itself).
    #[error("invalid schema definition: {0}")]
    Invalid(String),
    /// DynamoDB refused or could not be reached.
    #[error("DynamoDB call for {resource} failed: {message}")]
    Dynamo {
        /// Table name.
        resource: String,
        /// The SDK error with its cause chain.
        message: String,
    },
    /// Kinesis refused or could not be reached.
    #[error("Kinesis call for {resource} failed: {message}")]
    Kinesis {
        /// Stream name.
        resource: String,
        /// The SDK error with its cause chain.
        message: String,
    },
}

impl SchemaError {
    pub(crate) fn dynamo<E: std::error::Error>(resource: &str, e: E) -> Self {
        Self::Dynamo {
            resource: resource.to_owned(),
            message: describe(&e),
        }
    }

    pub(crate) fn kinesis<E: std::error::Error>(resource: &str, e: E) -> Self {
        Self::Kinesis {
            resource: resource.to_owned(),
            message: describe(&e),
        }
    }
}

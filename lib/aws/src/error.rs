//! Error types shared by the AWS adapters.
//!
//! Each area has one `thiserror` enum whose variants say what the caller can do. A failed AWS
//! call inside any of them is one [`AwsError`]: it keeps the SDK error whole as its
//! [`source`](std::error::Error::source) (downcast it to the operation's `SdkError` to match on
//! the modelled error), and answers the questions callers ask of it (the error code,
//! [`AwsError::is_throttling`], [`AwsError::is_conditional_check_failed`]) without string
//! matching. Its `Display` is one line naming the service, the operation and the resource.
//!
//! ```
//! use heatsink::error::AwsError;
//!
//! # fn shape(e: &AwsError) {
//! if e.is_throttling() {
//!     // back off and retry
//! } else if e.is_conditional_check_failed() {
//!     // someone else changed the item: re-read it
//! }
//! eprintln!("{e}"); // "DynamoDB PutItem on heatsink-counters failed: ConditionalCheckFailedException: …"
//! # }
//! ```

use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

/// Renders an error with its full source chain on one line (`a: b: c`), each cause's `Display`
/// once. (The SDK's `DisplayErrorContext` also appends the `Debug` form of the whole error,
/// raw HTTP response included, which is no message for a person.)
pub fn describe<E: std::error::Error>(e: &E) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// The error codes AWS services use for throttling, as the SDKs' own retry classifier lists
/// them (plus the KMS and DynamoDB Streams spellings heatsink meets).
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "KMSThrottlingException",
];

/// How a call failed before or after the service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The service answered with an error (it has a code).
    Service,
    /// The call or one attempt ran past its timeout.
    Timeout,
    /// The request never reached the service (connection refused, DNS, TLS).
    Unreachable,
    /// The service answered with something the SDK could not read.
    Response,
    /// The request could not be built (a bug or bad input on our side).
    Construction,
}

/// One failed AWS call, kept whole: service, operation, resource, error code and the SDK error
/// itself as [`source`](std::error::Error::source).
///
/// One pointer wide (the details are boxed), so area errors can carry it without making every
/// `Result` large.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct AwsError(Box<Details>);

#[derive(Debug, thiserror::Error)]
#[error("{service} {operation} on {resource} failed: {summary}")]
struct Details {
    service: &'static str,
    operation: &'static str,
    resource: String,
    failure: Failure,
    code: Option<String>,
    summary: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl AwsError {
    /// Wraps an SDK error from `service`'s `operation` on `resource` (a table, stream, shard,
    /// rule or bus name).
    pub fn new<E, R>(
        service: &'static str,
        operation: &'static str,
        resource: impl Into<String>,
        err: SdkError<E, R>,
    ) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let failure = match &err {
            SdkError::ServiceError(_) => Failure::Service,
            SdkError::TimeoutError(_) => Failure::Timeout,
            SdkError::DispatchFailure(_) => Failure::Unreachable,
            SdkError::ResponseError(_) => Failure::Response,
            _ => Failure::Construction,
        };
        let code = err.code().map(str::to_owned);
        let summary = match (failure, code.as_deref(), err.message()) {
            (Failure::Service, Some(code), Some(msg)) => format!("{code}: {msg}"),
            (Failure::Service, Some(code), None) => code.to_owned(),
            _ => describe(&err),
        };
        Self(Box::new(Details {
            service,
            operation,
            resource: resource.into(),
            failure,
            code,
            summary,
            source: Box::new(err),
        }))
    }

    /// A DynamoDB call's error.
    pub fn dynamodb<E, R>(
        operation: &'static str,
        table: impl Into<String>,
        err: SdkError<E, R>,
    ) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        Self::new("DynamoDB", operation, table, err)
    }

    /// The AWS service, as AWS names it (`DynamoDB`, `Kinesis`, `DynamoDB Streams`, …).
    pub fn service(&self) -> &'static str {
        self.0.service
    }

    /// The API operation (`PutItem`, `GetRecords`, …).
    pub fn operation(&self) -> &'static str {
        self.0.operation
    }

    /// The table, stream, shard, rule or bus the call was about.
    pub fn resource(&self) -> &str {
        &self.0.resource
    }

    /// How the call failed.
    pub fn failure(&self) -> Failure {
        self.0.failure
    }

    /// The service's error code (`ConditionalCheckFailedException`, …), if it answered.
    pub fn code(&self) -> Option<&str> {
        self.0.code.as_deref()
    }

    /// True when the service throttled the call: back off, then retry.
    pub fn is_throttling(&self) -> bool {
        self.code().is_some_and(|c| THROTTLING_CODES.contains(&c))
    }

    /// True when a DynamoDB condition expression was false: someone else changed the item.
    pub fn is_conditional_check_failed(&self) -> bool {
        self.code() == Some("ConditionalCheckFailedException")
    }

    /// True when the table, stream or other resource does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some("ResourceNotFoundException")
    }

    /// True when the failure is worth retrying after a pause: throttling, a timeout, an
    /// unreachable endpoint, an unreadable response, or a 5xx-style service fault.
    pub fn is_transient(&self) -> bool {
        match self.0.failure {
            Failure::Timeout | Failure::Unreachable | Failure::Response => true,
            Failure::Construction => false,
            Failure::Service => {
                self.is_throttling()
                    || self.code().is_some_and(|c| {
                        matches!(
                            c,
                            "InternalServerError" | "InternalFailure" | "ServiceUnavailable"
                        )
                    })
            }
        }
    }

    /// The SDK error itself, e.g. `downcast::<SdkError<PutItemError, HttpResponse>>()`.
    pub fn sdk_error<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.source.downcast_ref::<T>()
    }
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

    #[cfg(feature = "kinesis")]
    pub(crate) fn kinesis<E: std::error::Error>(resource: &str, e: E) -> Self {
        Self::Kinesis {
            resource: resource.to_owned(),
            message: describe(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_mocks::mock;
    use std::error::Error as _;

    use super::*;
    use crate::testing::mocked;

    async fn put_failing_with(err: fn() -> PutItemError) -> AwsError {
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_error(err);
        let ddb = mocked!(aws_sdk_dynamodb, put);
        ddb.put_item()
            .table_name("t-counters")
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("PutItem", "t-counters", e))
            .expect_err("mocked to fail")
    }

    #[tokio::test]
    async fn a_conditional_check_failure_keeps_its_code_and_the_sdk_error() {
        let err = put_failing_with(|| {
            PutItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .message("The conditional request failed")
                    .meta(
                        ErrorMetadata::builder()
                            .code("ConditionalCheckFailedException")
                            .message("The conditional request failed")
                            .build(),
                    )
                    .build(),
            )
        })
        .await;
        assert!(err.is_conditional_check_failed());
        assert!(!err.is_throttling());
        assert!(!err.is_transient());
        assert_eq!(err.code(), Some("ConditionalCheckFailedException"));
        assert_eq!(err.failure(), Failure::Service);
        assert_eq!(
            err.to_string(),
            "DynamoDB PutItem on t-counters failed: ConditionalCheckFailedException: The conditional request failed"
        );
        // The whole SDK error is there to match on.
        let sdk = err
            .sdk_error::<SdkError<PutItemError, aws_sdk_dynamodb::config::http::HttpResponse>>()
            .expect("the SDK error is the source");
        assert!(
            sdk.as_service_error()
                .is_some_and(PutItemError::is_conditional_check_failed_exception)
        );
        assert!(err.source().is_some());
    }

    #[test]
    fn an_aws_error_is_one_pointer_wide_so_area_errors_carry_it_unboxed() {
        assert_eq!(size_of::<AwsError>(), size_of::<usize>());
    }

    #[tokio::test]
    async fn throttling_is_recognised_by_code_and_is_transient() {
        let err = put_failing_with(|| {
            PutItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(
                        ErrorMetadata::builder()
                            .code("ProvisionedThroughputExceededException")
                            .build(),
                    )
                    .build(),
            )
        })
        .await;
        assert!(err.is_throttling());
        assert!(err.is_transient());
        assert!(!err.is_conditional_check_failed());
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_one_line_without_a_debug_dump() {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::for_tests())
            .endpoint_url("http://127.0.0.1:1")
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build();
        let err = aws_sdk_dynamodb::Client::from_conf(conf)
            .describe_table()
            .table_name("nope")
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("DescribeTable", "nope", e))
            .expect_err("nothing listens on port 1");
        let text = err.to_string();
        assert_eq!(err.failure(), Failure::Unreachable);
        assert!(err.is_transient());
        assert!(
            text.starts_with("DynamoDB DescribeTable on nope failed: dispatch failure"),
            "{text}"
        );
        assert!(
            !text.contains('\n') && !text.contains("DispatchFailure {"),
            "{text}"
        );
    }
}

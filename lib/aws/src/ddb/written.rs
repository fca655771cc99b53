//! The answer of a conditional write, read one way everywhere: written, refused by its
//! condition, or failed.
//!
//! ```ignore
//! // Ok(true): written; Ok(false): the condition did not hold (ConditionalCheckFailed),
//! // nothing written; Err: any other failure, as one AwsError naming the call and the table.
//! let taken = ddb.put_item().table_name(t).set_item(Some(row)).only_if(&free)
//!     .send().await.written("PutItem", t)?;
//! ```

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use crate::error::AwsError;

/// The result of a PutItem, UpdateItem or DeleteItem sent with a condition.
pub(crate) trait Written {
    /// `Ok(true)` when the write landed, `Ok(false)` when its condition refused it
    /// (`ConditionalCheckFailedException`: nothing was written), any other failure an
    /// [`AwsError`] naming DynamoDB's `operation` on `table`.
    fn written(self, operation: &'static str, table: &str) -> Result<bool, AwsError>;
}

impl<T, E, R> Written for Result<T, SdkError<E, R>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    fn written(self, operation: &'static str, table: &str) -> Result<bool, AwsError> {
        match self {
            Ok(_) => Ok(true),
            Err(e) => {
                let e = AwsError::dynamodb(operation, table, e);
                if e.is_conditional_check_failed() {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_mocks::{MockResponse, mock};

    use super::*;
    use crate::testing::error_meta;

    async fn put(
        answer: fn() -> MockResponse<PutItemOutput, PutItemError>,
    ) -> Result<bool, AwsError> {
        let rule =
            mock!(aws_sdk_dynamodb::Client::put_item).then_compute_response(move |_| answer());
        let ddb = crate::mocked!(aws_sdk_dynamodb with |c| c.retry_config(
            aws_sdk_dynamodb::config::retry::RetryConfig::disabled()); rule);
        ddb.put_item()
            .table_name("t")
            .send()
            .await
            .written("PutItem", "t")
    }

    /// Written is true, a refused condition false, and any other failure (a throttle here)
    /// stays an error naming the call.
    #[tokio::test]
    async fn smithy_mock_a_refused_condition_is_false_and_any_other_failure_an_error() {
        assert!(
            put(|| MockResponse::Output(PutItemOutput::builder().build()))
                .await
                .expect("written")
        );
        let refused = put(|| {
            MockResponse::Error(PutItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(error_meta("ConditionalCheckFailedException"))
                    .build(),
            ))
        })
        .await;
        assert!(!refused.expect("a refusal is no error"));
        let throttled = put(|| {
            MockResponse::Error(PutItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(error_meta("ProvisionedThroughputExceededException"))
                    .message("slow down")
                    .build(),
            ))
        })
        .await
        .expect_err("a throttle is an error");
        assert!(throttled.is_throttling());
        assert!(
            throttled
                .to_string()
                .starts_with("DynamoDB PutItem on t failed"),
            "{throttled}"
        );
    }
}

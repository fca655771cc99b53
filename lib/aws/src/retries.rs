//! One retry policy for heatsink's SDK clients, pinned so a change of the SDK's defaults does
//! not change how a hot path behaves under throttling.
//!
//! The SDK's standard retries today: 3 attempts, backoff `random × 1 s × 2^attempt` capped at
//! 20 s. `AWS_NEW_RETRIES_2026=true` (and, later, a new behaviour version) switches a client to
//! "retry behaviour 2.1": for DynamoDB 4 attempts, a 25 ms base, a 1 s throttling delay, an
//! adaptive send-token bucket. Either may suit a given service; what must not happen is a hot
//! key's writers changing their retry rate because an environment variable or a crate update
//! flipped, silently, mid-incident. So every client heatsink configures (the CLI's, the Lambda
//! functions') takes [`Retries::PINNED`]: the standard values above, set explicitly, without a
//! retry-behaviour version. A team that wants other retries builds its clients with its own
//! `RetryConfig` after [`Retries::apply`], or never calls it.
//!
//! ```
//! use heatsink::retries::Retries;
//!
//! let config = aws_types::SdkConfig::builder().build();
//! let pinned = Retries::PINNED.apply(&config);
//! let r = pinned.retry_config().expect("set");
//! assert_eq!(r.max_attempts(), 3);
//! assert_eq!(r.initial_backoff(), std::time::Duration::from_secs(1));
//! ```
//!
//! # Limits
//! Attempts, backoff base and cap are pinned; the retry classifiers (which errors are retried)
//! are the SDK's. Every operation is still bounded by [`crate::timeouts::Timeouts`], whatever
//! the retries (5 s in a Lambda function, 15 s in the CLI).

use std::time::Duration;

use aws_smithy_types::retry::RetryConfig;

/// Attempts and backoff of SDK calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retries {
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// The backoff base: attempt `n` waits up to `initial_backoff × 2^(n-1)`, at random.
    pub initial_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Retries {
    /// The SDK's standard retries as of 2026 (3 attempts, 1 s base, 20 s cap), pinned.
    pub const PINNED: Self = Self {
        max_attempts: 3,
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(20),
    };

    /// As the SDK's retry configuration: standard mode, these values, no retry-behaviour version
    /// (so `AWS_NEW_RETRIES_2026` has no say).
    pub fn config(&self) -> RetryConfig {
        RetryConfig::standard()
            .with_max_attempts(self.max_attempts)
            .with_initial_backoff(self.initial_backoff)
            .with_max_backoff(self.max_backoff)
    }

    /// `config` with these retries: build every client from the result.
    pub fn apply(&self, config: &aws_types::SdkConfig) -> aws_types::SdkConfig {
        config.to_builder().retry_config(self.config()).build()
    }
}

impl Default for Retries {
    /// [`Retries::PINNED`].
    fn default() -> Self {
        Self::PINNED
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_types::retry::RetrySpec;

    use super::*;

    /// What `aws_config` 1.13 loads with `AWS_NEW_RETRIES_2026=true` (its
    /// `default_provider::retry_config`): the standard retries tagged with behaviour 2.1.
    fn switched() -> RetryConfig {
        RetryConfig::standard().with_retry_spec(RetrySpec::v2_1())
    }

    #[test]
    fn the_pinned_retries_replace_the_2026_defaults_and_any_other() {
        assert_ne!(switched(), Retries::PINNED.config());
        for rc in [switched(), RetryConfig::standard(), RetryConfig::disabled()] {
            let sdk = aws_types::SdkConfig::builder().retry_config(rc).build();
            let pinned = Retries::PINNED.apply(&sdk);
            let r = pinned.retry_config().expect("set");
            assert_eq!(r, &Retries::PINNED.config());
            assert_eq!(r.retry_spec(), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_call_is_attempted_the_pinned_number_of_times_api_reference_shape() {
        let throttle = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Throughput exceeds the current capacity of your table or index."}"#;
        let rule = mock!(aws_sdk_dynamodb::Client::put_item)
            .sequence()
            .http_status(400, Some(throttle.to_owned()))
            .times(10)
            .output(|| PutItemOutput::builder().build())
            .build();
        let sdk = Retries::PINNED.apply(
            &aws_types::SdkConfig::builder()
                .retry_config(switched())
                .build(),
        );
        let pinned = sdk.retry_config().cloned().expect("set");
        let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule], |c| c
            .retry_config(pinned.clone()));
        let out = ddb
            .put_item()
            .table_name("t")
            .item("pk", AttributeValue::S("p9".into()))
            .send()
            .await;
        assert!(out.is_err(), "every attempt throttled");
        assert_eq!(rule.num_calls(), 3);
    }
}

//! Timeouts on every SDK call of the router and the mover.
//!
//! A hung call must not hold a write or the pause: each attempt of a call gets
//! [`CallTimeouts::attempt`] and the whole call (the SDK's own retries included)
//! [`CallTimeouts::operation`], both well under the router's give-up window (about 5 s of
//! MOVED answers and directory polls, [`heatsink_core::slots::RetryRule`]). A client whose
//! configuration already sets an operation timeout keeps its own. A timed-out call is
//! transient: the router retries it with its retry rule until the rule's deadline
//! ([`heatsink_core::slots::RetryRule::deadline`], 10 s: a write to a hung owner gives up within
//! 12.5 s with [`super::MoveError::Unanswered`]), the mover with capped, jittered backoff inside
//! the step's deadline ([`heatsink_core::slots::backoff`]). A read is not retried: its first
//! timed-out call (2.5 s) ends it.

use std::time::Duration;

use aws_smithy_types::timeout::TimeoutConfig;

/// Timeouts of one SDK call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTimeouts {
    /// One attempt (one HTTP request and its answer).
    pub attempt: Duration,
    /// The whole call, the SDK's retries included.
    pub operation: Duration,
}

impl Default for CallTimeouts {
    /// 1 s per attempt, 2.5 s per call: single-item writes and reads, 100-item pages and
    /// 100-item transactions answer in milliseconds on DynamoDB.
    fn default() -> Self {
        Self {
            attempt: Duration::from_secs(1),
            operation: Duration::from_millis(2_500),
        }
    }
}

impl CallTimeouts {
    fn config(&self, connect: Option<Duration>) -> TimeoutConfig {
        let mut b = TimeoutConfig::builder()
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation);
        if let Some(c) = connect {
            b = b.connect_timeout(c);
        }
        b.build()
    }
}

/// `client` with `timeouts`, unless its configuration sets an operation timeout already.
pub fn bounded_ddb(
    client: &aws_sdk_dynamodb::Client,
    timeouts: CallTimeouts,
) -> aws_sdk_dynamodb::Client {
    let conf = client.config();
    let current = conf.timeout_config();
    if current.is_some_and(|t| t.operation_timeout().is_some()) {
        return client.clone();
    }
    let connect = current.and_then(|t| t.connect_timeout());
    aws_sdk_dynamodb::Client::from_conf(
        conf.to_builder()
            .timeout_config(timeouts.config(connect))
            .build(),
    )
}

/// [`bounded_ddb`] for a DynamoDB Streams client.
#[cfg(feature = "streams")]
pub fn bounded_streams(
    client: &aws_sdk_dynamodbstreams::Client,
    timeouts: CallTimeouts,
) -> aws_sdk_dynamodbstreams::Client {
    let conf = client.config();
    let current = conf.timeout_config();
    if current.is_some_and(|t| t.operation_timeout().is_some()) {
        return client.clone();
    }
    let connect = current.and_then(|t| t.connect_timeout());
    aws_sdk_dynamodbstreams::Client::from_conf(
        conf.to_builder()
            .timeout_config(timeouts.config(connect))
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_without_an_operation_timeout_gets_ours_and_one_with_keeps_its_own() {
        let base = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::for_tests());
        let plain = aws_sdk_dynamodb::Client::from_conf(base.clone().build());
        let bounded = bounded_ddb(&plain, CallTimeouts::default());
        let t = bounded.config().timeout_config().expect("timeouts");
        assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(1)));
        assert_eq!(t.operation_timeout(), Some(Duration::from_millis(2_500)));
        let own = aws_sdk_dynamodb::Client::from_conf(
            base.timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(Duration::from_secs(9))
                    .build(),
            )
            .build(),
        );
        let kept = bounded_ddb(&own, CallTimeouts::default());
        assert_eq!(
            kept.config()
                .timeout_config()
                .and_then(|t| t.operation_timeout()),
            Some(Duration::from_secs(9))
        );
    }
}

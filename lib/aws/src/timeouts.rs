//! One timeout policy for every SDK call, so no call waits forever.
//!
//! The AWS SDK sets a connect timeout (3.1 s) and nothing else: a call whose connection is open
//! but whose answer never comes (a partition, a stalled proxy, a throttled endpoint that stops
//! reading) waits as long as the process lives. A hung call holds a Lambda until its own
//! timeout, a CLI forever, a worker past its lease. Every client heatsink builds, and every
//! client handed to a heatsink type that has no operation timeout of its own, gets one:
//!
//! | where | attempt | operation (retries included) |
//! |---|---|---|
//! | the CLI, and clients the library builds or is handed without a timeout ([`Timeouts::CALL`]) | 5 s | 15 s |
//! | Lambda functions (`heatsink::lambda::start`, [`Timeouts::LAMBDA`]) | 2 s | 5 s |
//! | a Lambda invocation as a whole (`heatsink::lambda::before_deadline`) | — | its remaining time less 500 ms |
//! | stream workers' sources and lease table ([`Timeouts::for_lease`]) | ¼ lease (2.5 s) | ½ lease (5 s) |
//! | the slot router and mover ([`crate::slots::calls::CallTimeouts`]) | 1 s | 2.5 s |
//!
//! What a caller waits for at most when every call hangs: a router write, its
//! [`RetryRule::deadline`](crate::slots::RetryRule::deadline) (10 s) plus one call (12.5 s),
//! then [`MoveError::Unanswered`](crate::slots::MoveError::Unanswered); a router read, one call
//! per table it reads; a producer's record, `max_attempts × (operation + backoff_cap)` (204 s
//! with the defaults), then it is handed back in `ProducerReport::failed_records` with the
//! timeout as `last_error` (see `heatsink::kinesis::Producer`). `docs/bounds.md` has the table.
//!
//! A Lambda invocation is cut at its own deadline less a margin, so a function answers (a
//! partial batch failure, an error) before Lambda kills it: every call of an invocation ends by
//! the smaller of its operation timeout and the invocation's remaining time. A call that times
//! out fails with a one-line error naming the operation and the resource
//! ([`crate::error::AwsError`]: "… timed out …").
//!
//! ```
//! use std::time::Duration;
//! use heatsink::timeouts::Timeouts;
//!
//! let config = aws_types::SdkConfig::builder().build();
//! let bounded = Timeouts::CALL.apply(&config);
//! let t = bounded.timeout_config().expect("set");
//! assert_eq!(t.operation_timeout(), Some(Duration::from_secs(15)));
//! assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(5)));
//! assert_eq!(Timeouts::for_lease(Duration::from_secs(10)).attempt, Duration::from_millis(2_500));
//! ```

use std::time::Duration;

use aws_smithy_types::timeout::TimeoutConfig;

/// Attempt and operation timeouts of SDK calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// One HTTP attempt.
    pub attempt: Duration,
    /// The whole operation, retries included.
    pub operation: Duration,
}

impl Timeouts {
    /// The CLI's calls, and clients a heatsink type builds or is handed without an operation
    /// timeout (the producer, a slot directory used alone; the router and the mover apply their
    /// own shorter [`crate::slots::calls::CallTimeouts`] first): 5 s an attempt, 15 s in all.
    /// DynamoDB and Kinesis answer in tens of ms; an attempt that takes 5 s is hung.
    pub const CALL: Self = Self {
        attempt: Duration::from_secs(5),
        operation: Duration::from_secs(15),
    };

    /// A Lambda function's calls: 2 s an attempt, 5 s in all, which leaves room for the answer
    /// in the shortest function timeout the stacks deploy (the API's 10 s).
    pub const LAMBDA: Self = Self {
        attempt: Duration::from_secs(2),
        operation: Duration::from_secs(5),
    };

    /// A quarter of `lease` per attempt, half of it per operation: a call made under a lease
    /// (a stream worker's) fails before the lease lapses, with time left for the next renewal.
    pub fn for_lease(lease: Duration) -> Self {
        Self {
            attempt: lease / 4,
            operation: lease / 2,
        }
    }

    /// These timeouts, each at most `budget` (what is left of a deadline).
    pub fn within(self, budget: Duration) -> Self {
        Self {
            attempt: self.attempt.min(budget),
            operation: self.operation.min(budget),
        }
    }

    /// As the SDK's timeout configuration (its connect timeout kept at the SDK default, 3.1 s,
    /// or the attempt timeout if shorter).
    pub fn config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.attempt.min(Duration::from_millis(3_100)))
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }

    /// `config` with these timeouts: build every client from the result.
    pub fn apply(&self, config: &aws_types::SdkConfig) -> aws_types::SdkConfig {
        config.to_builder().timeout_config(self.config()).build()
    }

    /// Whether a client configured with `config` already bounds its operations.
    pub fn is_bounded(config: Option<&TimeoutConfig>) -> bool {
        config.is_some_and(|t| t.operation_timeout().is_some())
    }
}

impl Default for Timeouts {
    /// [`Timeouts::CALL`].
    fn default() -> Self {
        Self::CALL
    }
}

/// `client` (of SDK crate `$krate`) unchanged if it bounds its operations, else the same client
/// with `$timeouts`.
macro_rules! bounded {
    ($krate:ident, $client:expr, $timeouts:expr) => {{
        let client = $client;
        if $crate::timeouts::Timeouts::is_bounded(client.config().timeout_config()) {
            client
        } else {
            let conf = client
                .config()
                .to_builder()
                .timeout_config($timeouts.config())
                .build();
            $krate::Client::from_conf(conf)
        }
    }};
}

pub(crate) use bounded;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_without_an_operation_timeout_gets_one_and_one_with_its_own_keeps_it() {
        let bare = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                .build(),
        );
        assert!(!Timeouts::is_bounded(bare.config().timeout_config()));
        let c = bounded!(aws_sdk_dynamodb, bare, Timeouts::CALL);
        let t = c.config().timeout_config().expect("set");
        assert_eq!(t.operation_timeout(), Some(Duration::from_secs(15)));
        assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(5)));
        let own = Timeouts {
            attempt: Duration::from_millis(100),
            operation: Duration::from_millis(300),
        };
        let tight = bounded!(aws_sdk_dynamodb, c.clone(), own);
        assert_eq!(
            tight
                .config()
                .timeout_config()
                .and_then(|t| t.operation_timeout()),
            Some(Duration::from_secs(15)),
            "a client with its own bound keeps it"
        );
    }

    #[test]
    fn a_deadline_shortens_the_policy_and_never_lengthens_it() {
        let t = Timeouts::LAMBDA.within(Duration::from_secs(3));
        assert_eq!(
            (t.attempt, t.operation),
            (Duration::from_secs(2), Duration::from_secs(3))
        );
        let t = Timeouts::LAMBDA.within(Duration::from_secs(60));
        assert_eq!(t, Timeouts::LAMBDA);
        assert_eq!(
            Timeouts::for_lease(Duration::from_secs(10)).operation,
            Duration::from_secs(5)
        );
        assert_eq!(
            Timeouts::CALL.config().connect_timeout(),
            Some(Duration::from_millis(3_100))
        );
    }
}

//! Test helpers for the unit tests of heatsink and of crates built on it (feature `test-util`).

/// A client of the SDK crate `$krate` (`aws_sdk_dynamodb`, `aws_sdk_cloudwatch`, ...) answering
/// from the aws-smithy-mocks `$rule`s in any order: `mock_client!` in `RuleMode::MatchAny`,
/// with the SDK's test defaults (region, credentials). `$krate with $conf; $rule, ...` also
/// applies `$conf` (a `Fn(config::Builder) -> config::Builder`) to the config, e.g. to add an
/// interceptor.
#[macro_export]
macro_rules! mocked {
    ($krate:ident with $conf:expr; $($rule:expr),* $(,)?) => {
        aws_smithy_mocks::mock_client!(
            $krate,
            aws_smithy_mocks::RuleMode::MatchAny,
            [$(&$rule),*],
            $conf
        )
    };
    ($krate:ident $(, $rule:expr)* $(,)?) => {
        $crate::mocked!($krate with |conf| conf; $($rule),*)
    };
}

pub use crate::mocked;

/// The first error of type `T` in `err`'s source chain, `err` included: how a test proves an
/// area error kept the SDK error whole.
pub fn in_chain<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    std::iter::successors(Some(err), |e| e.source()).find_map(|e| e.downcast_ref::<T>())
}

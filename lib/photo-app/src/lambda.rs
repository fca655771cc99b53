//! The photo app's functions' cold start: the toolkit's [`heatsink::lambda::start`] over the
//! photo app's tables.

use crate::schema::Schema;

/// What every photo-app function starts with.
#[derive(Debug, Clone)]
pub struct LambdaStart {
    /// The SDK configuration from the Lambda environment.
    pub config: aws_types::SdkConfig,
    /// The tables named by `HEATSINK_PREFIX` (default [`crate::schema::DEFAULT_PREFIX`]).
    pub schema: Schema,
    /// A DynamoDB client logging consumed capacity on every table of the schema.
    pub ddb: aws_sdk_dynamodb::Client,
}

/// A function's cold start: logging, the SDK configuration, the schema from
/// `HEATSINK_PREFIX` and the capacity-logging DynamoDB client.
pub async fn start_lambda() -> LambdaStart {
    let start = heatsink::lambda::start(|prefix| Schema::new(prefix).tables()).await;
    LambdaStart {
        config: start.config,
        schema: Schema::new(start.prefix),
        ddb: start.ddb,
    }
}

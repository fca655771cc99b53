//! One module per subcommand.

pub mod demo;
pub mod hot;
pub mod keys;
pub mod lineage;
pub mod local;
pub mod plan;
pub mod schema;
pub mod sim;
pub mod tail;
pub mod top;

/// Any command's failure, shown to the operator as one line.
pub type CmdResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Loads the AWS configuration from the environment (region, `AWS_ENDPOINT_URL_*`, credentials).
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

//! Scaffolding shared by the heatsink examples (not part of heatsink itself), and the snippets of
//! the README and of docs/library.md compiled as doctests.
//!
//! The examples that talk to AWS run against whatever the standard chain points at
//! (`AWS_ENDPOINT_URL_*`, `AWS_REGION`, credentials). [`Scratch`] keeps them honest against a
//! shared account: every table or stream an example creates is named with a random prefix and
//! deleted by [`Scratch::cleanup`], whatever the example's outcome.

use std::error::Error;

/// The error type of the examples' `main`s.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// Uniquely named resources for one example run, deleted at the end.
#[derive(Debug)]
pub struct Scratch {
    /// The SDK configuration from the environment.
    pub config: aws_config::SdkConfig,
    /// `ex<8 hex digits>-`: the prefix of every resource this run creates.
    pub prefix: String,
    tables: Vec<String>,
    streams: Vec<String>,
}

impl Scratch {
    /// Loads the SDK configuration; refuses to run without `AWS_ENDPOINT_URL_DYNAMODB` unless
    /// `HEATSINK_EXAMPLES_AWS=1` says real AWS is meant (the examples create and delete tables).
    pub async fn new() -> Result<Self, BoxError> {
        let emulated = std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some();
        let real = std::env::var("HEATSINK_EXAMPLES_AWS").as_deref() == Ok("1");
        if !emulated && !real {
            return Err(
                "no AWS_ENDPOINT_URL_DYNAMODB: run `eval \"$(localstack/stack env)\"` \
                        first (or set HEATSINK_EXAMPLES_AWS=1 to use real AWS)"
                    .into(),
            );
        }
        Ok(Self {
            config: aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await,
            prefix: format!("ex{:08x}-", rand::random::<u32>()),
            tables: Vec::new(),
            streams: Vec::new(),
        })
    }

    /// `prefix + logical`, remembered as a table to delete.
    pub fn table(&mut self, logical: &str) -> String {
        let name = format!("{}{logical}", self.prefix);
        self.tables.push(name.clone());
        name
    }

    /// `prefix + logical`, remembered as a Kinesis stream to delete.
    pub fn stream(&mut self, logical: &str) -> String {
        let name = format!("{}{logical}", self.prefix);
        self.streams.push(name.clone());
        name
    }

    /// Deletes every table and stream named through this scratch; failures are printed, not raised.
    pub async fn cleanup(&self) {
        let ddb = aws_sdk_dynamodb::Client::new(&self.config);
        for table in &self.tables {
            if let Err(e) = ddb.delete_table().table_name(table).send().await {
                eprintln!("cleanup: table {table}: {e}");
            }
        }
        let kinesis = aws_sdk_kinesis::Client::new(&self.config);
        for stream in &self.streams {
            if let Err(e) = kinesis.delete_stream().stream_name(stream).send().await {
                eprintln!("cleanup: stream {stream}: {e}");
            }
        }
    }
}

/// The README, whose Rust snippets are compiled (and, unless marked `no_run`, run) by
/// `cargo test -p heatsink-examples --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// docs/library.md ("Using the library"), whose Rust snippets are compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/library.md")]
pub struct LibraryDoctests;

//! An SDK HTTP client that bounds how many calls are in flight at once.
//!
//! [`bounded`] wraps the HTTP client of an [`SdkConfig`] so every client
//! built from the returned config waits for one of `limit` permits before sending a call and
//! releases it when the response (or the error) is back. With `limit = 1` the calls of those
//! clients are serialized.
//!
//! Why it exists: moto 5.2's `TransactWriteItems` is not isolated. It deep-copies every table a
//! transaction names when the transaction begins and, when the transaction is cancelled (a
//! failed condition, such as a refused fenced write), puts that copy back, reverting every write
//! that committed to those tables in between. A live move refuses fenced writes on the source
//! while routers keep writing the source's other slots, so on moto an acknowledged write to a
//! slot that never moved can be reverted by the emulator (tests/it/slots.rs reproduces it).
//! LocalStack's host-mode DynamoDB showed the same fault. DynamoDB and dynoxide isolate
//! transactions. The library never guesses which endpoint it talks to: the caller opts in.
//! The `heatsink` CLI's slots and move commands take `HEATSINK_SERIAL_DYNAMODB=1` (which
//! `localstack/stack env` exports on the moto and LocalStack lanes) and then use a limit of 1;
//! without it they keep full concurrency.
//!
//! ```
//! fn clients(config: &aws_types::SdkConfig) -> aws_sdk_dynamodb::Client {
//!     let serial = heatsink_sim::http::bounded(config, 1);
//!     aws_sdk_dynamodb::Client::new(&serial) // one call at a time
//! }
//! ```
//!
//! Limits: the bound is per returned config (clients built from one config share it), not per
//! process; a config without an HTTP client gets the SDK's default one (hyper 1.x, rustls).

use std::sync::Arc;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_types::SdkConfig;
use tokio::sync::Semaphore;

#[derive(Debug)]
struct Bounded {
    inner: SharedHttpClient,
    permits: Arc<Semaphore>,
}

#[derive(Debug)]
struct BoundedConnector {
    inner: SharedHttpConnector,
    permits: Arc<Semaphore>,
}

impl HttpClient for Bounded {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(BoundedConnector {
            inner: self.inner.http_connector(settings, components),
            permits: self.permits.clone(),
        })
    }
}

impl HttpConnector for BoundedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (inner, permits) = (self.inner.clone(), self.permits.clone());
        HttpConnectorFuture::new(async move {
            // The semaphore is never closed, so acquiring cannot fail; if it ever did, the call
            // simply goes out unbounded.
            let _permit = permits.acquire_owned().await.ok();
            inner.call(request).await
        })
    }
}

/// `config` with its HTTP client wrapped so that at most `limit` calls (at least 1) are in
/// flight at once across every client built from the result.
pub fn bounded(config: &SdkConfig, limit: usize) -> SdkConfig {
    // A loaded config usually carries no HTTP client (each SDK client picks its default when
    // built): wrap the same default, hyper 1.x with rustls on aws-lc.
    let inner = config.http_client().unwrap_or_else(|| {
        aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::AwsLc,
            ))
            .build_https()
    });
    let client = SharedHttpClient::new(Bounded {
        inner,
        permits: Arc::new(Semaphore::new(limit.max(1))),
    });
    config.to_builder().http_client(client).build()
}

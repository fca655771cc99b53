//! likes-api: `POST /posts/{post}/likes` and `GET /posts/{post}` behind a Function URL or an
//! API Gateway HTTP API. All logic is in `heatsink_photo_app::LikesApi`.
//!
//! Environment: `HEATSINK_PREFIX` (default `heatsink-`); `HEATSINK_USER_LIKES_PER_SECOND`, the
//! admission limit per user (default 10/s, bursts of twice that; the hot-key directory's `limit`
//! entries override it per post or per `tenant#<user>`).

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use heatsink::admission::Gate;
use heatsink::cache::MicroCache;
use heatsink::directory::{CachedDirectory, Directory};
use heatsink::guard::{AdmissionConfig, Limit};
use heatsink::metrics::Emf;
use heatsink_photo_app::LikesApi;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::{Function, Metric};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart { schema, ddb, .. } = start_lambda().await;
    let per_user: u32 = match std::env::var("HEATSINK_USER_LIKES_PER_SECOND") {
        Ok(v) => v.parse()?,
        Err(_) => 10,
    };
    // The directory is read at most every 5 s per instance: a Scan of the few hot keys.
    let directory = CachedDirectory::new(
        Directory::from_schema(ddb.clone(), schema.toolkit()),
        Duration::from_secs(5),
    );
    let gate = Gate::new(
        AdmissionConfig::default().tenant_limit(Limit::per_second(per_user, per_user * 2)?),
        Some(Arc::new(directory)),
    )?;
    // The micro-cache's defaults: fresh for 1 s, served stale until 3 s while one refresh runs.
    let api = LikesApi::new(ddb, &schema)
        .with_cache(MicroCache::builder().build())
        .with_gate(gate);
    let api = &api;
    run(service_fn(
        move |event: LambdaEvent<ApiGatewayV2httpRequest>| async move {
            // Boxed: the handler future is deep enough to overflow layout computation inline.
            let resp = Box::pin(api.handle(event.payload)).await;
            if resp.status_code == 429 {
                Emf::new(Function::LikesApi)
                    .count(Metric::AdmissionRejected, 1)
                    .flush();
            }
            Ok::<_, Error>(resp)
        },
    ))
    .await
}

//! likes-api: `POST /posts/{post}/likes` and `GET /posts/{post}` behind an API Gateway HTTP
//! API whose `POST` route has a JWT authorizer. All logic is in `heatsink_photo_app::LikesApi`:
//! the liking user is the verified `sub` claim, never a header; a `POST` without one is 401.
//!
//! Environment: `HEATSINK_PREFIX` (default `heatsink-`); `HEATSINK_USER_LIKES_PER_SECOND` and
//! `HEATSINK_POST_LIKES_PER_SECOND`, the admission limits per user and per post (defaults 10/s
//! and 2,000/s per instance, bursts of twice that; `heatsink_photo_app::api_limits`); the
//! hot-key directory's `limit` entries override them per post or per `tenant#<user>`.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use heatsink::hot::Gate;
use heatsink::hot::cache::MicroCache;
use heatsink::hot::{CachedDirectory, Directory};
use heatsink::metrics::Emf;
use heatsink_photo_app::LikesApi;
use heatsink_photo_app::api_limits::LikesLimits;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::{Function, Metric};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart { schema, ddb, .. } = start_lambda().await;
    let admission = LikesLimits::from_env()?.admission()?;
    // The directory is read at most every 5 s per instance: a Scan of the few hot keys.
    let directory = CachedDirectory::new(
        Directory::from_schema(ddb.clone(), schema.toolkit()),
        Duration::from_secs(5),
    );
    let gate = Gate::new(admission, Some(Arc::new(directory)))?;
    // The micro-cache's defaults: fresh for 1 s, served stale until 3 s while one refresh runs.
    let api = LikesApi::new(ddb, &schema)
        .with_cache(MicroCache::builder().build())
        .with_gate(gate);
    let api = &api;
    run(service_fn(
        move |event: LambdaEvent<ApiGatewayV2httpRequest>| async move {
            // Boxed: the handler future is deep enough to overflow layout computation inline.
            // Cut before the deadline: a 503 the caller may retry instead of a Lambda timeout.
            let deadline = event.context.deadline;
            let resp =
                heatsink::lambda::before_deadline(deadline, Box::pin(api.handle(event.payload)))
                    .await
                    .unwrap_or_else(|cut| {
                        lambda_runtime::tracing::error!(error = %cut, "likes-api request cut at its deadline");
                        heatsink_photo_app::api::response(
                            503,
                            serde_json::json!({"error": "timed out; retry"}),
                        )
                    });
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

#[cfg(test)]
mod tests {
    use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
    use heatsink_photo_app::api::verified_user;
    use heatsink_photo_app::{LikesApi, Schema};

    /// An HTTP API (payload 2.0) event as API Gateway delivers it, with `authorizer` spliced in.
    fn event(authorizer: serde_json::Value) -> ApiGatewayV2httpRequest {
        let mut context = serde_json::json!({
            "accountId": "123456789012", "apiId": "abc123", "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "http": {"method": "POST", "path": "/posts/p9/likes", "protocol": "HTTP/1.1", "sourceIp": "203.0.113.9", "userAgent": "curl"},
            "requestId": "r1", "routeKey": "POST /posts/{post}/likes", "stage": "$default", "time": "01/Dec/2026:00:00:00 +0000", "timeEpoch": 1_796_083_200_000_u64
        });
        if !authorizer.is_null() {
            context["authorizer"] = authorizer;
        }
        serde_json::from_value(serde_json::json!({
            "version": "2.0", "routeKey": "POST /posts/{post}/likes", "rawPath": "/posts/p9/likes", "rawQueryString": "",
            "headers": {"x-user-id": "victim", "content-type": "application/json"},
            "pathParameters": {"post": "p9"}, "isBase64Encoded": false, "requestContext": context
        }))
        .expect("an API Gateway v2 event")
    }

    #[test]
    fn the_verified_sub_is_read_from_the_authorizer_context_of_a_real_event() {
        let signed = event(
            serde_json::json!({"jwt": {"claims": {"sub": "alice", "iss": "https://issuer"}, "scopes": null}}),
        );
        assert_eq!(
            verified_user(&signed),
            Some("alice"),
            "the claim, not the header"
        );
        assert_eq!(verified_user(&event(serde_json::Value::Null)), None);
    }

    #[tokio::test]
    async fn a_forged_header_without_claims_is_refused_by_the_deployed_handler() {
        // No endpoint is reachable: a request that got past identity would fail with 500, not 401.
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_dynamodb::config::Region::new("eu-west-1"))
            .endpoint_url("http://127.0.0.1:9")
            .build();
        let api = LikesApi::new(
            aws_sdk_dynamodb::Client::from_conf(config),
            &Schema::default(),
        );
        let resp = api.handle(event(serde_json::Value::Null)).await;
        assert_eq!(resp.status_code, 401);
    }
}

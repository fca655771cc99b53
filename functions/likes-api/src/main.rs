//! likes-api: `POST /posts/{post}/likes` and `GET /posts/{post}` behind a Function URL or an
//! API Gateway HTTP API. All logic is in `heatsink::likes::LikesApi`.

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use heatsink::likes::LikesApi;
use heatsink::schema::{DEFAULT_PREFIX, Schema};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt().json().without_time().init();
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let prefix = std::env::var("HEATSINK_PREFIX").unwrap_or_else(|_| DEFAULT_PREFIX.into());
    let api = LikesApi::new(aws_sdk_dynamodb::Client::new(&config), &Schema::new(prefix));
    let api = &api;
    run(service_fn(
        move |event: LambdaEvent<ApiGatewayV2httpRequest>| async move {
            Ok::<_, Error>(api.handle(event.payload).await)
        },
    ))
    .await
}

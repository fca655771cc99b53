//! The likes API: `POST /posts/{post}/likes` records a like durably, `GET /posts/{post}`
//! reads the count.
//!
//! A like is acknowledged only once it is durable: `liked[user, post]` is written with
//! `attribute_not_exists`, so a repeated like is idempotent and says so (201 new, 200 already
//! liked). The count is a view: the aggregator ([`crate::aggregator`](mod@crate::aggregator)) flushes it from the
//! `liked` table's change stream, and the rebuilder ([`crate::rebuild`]) repairs it. Reads go
//! through the toolkit's micro-cache, likes through its admission gate (429 with
//! `Retry-After`). Status codes: 400 malformed, 404 unknown post or route, 405 wrong method,
//! 500 (with a retry hint) when DynamoDB fails.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::admission::Gate;
use heatsink::cache::{CacheError, MicroCache, Source};
use heatsink::clock::now_ms;
use heatsink::counter::{CounterKey, CounterStore, CounterStoreError};
use heatsink::error::AwsError;
use heatsink::guard::{Decision, Scope};
use serde::Serialize;
use serde_json::{Value, json};

use crate::id;
use crate::mapper::{COUNTER, LIKED_AT};

pub use crate::id::MAX_ID_LEN;

/// Checks a post or user id ([`id::check`]); a bad one is a 400.
pub fn valid_id(kind: &str, id: &str) -> Result<(), LikesError> {
    id::check(kind, id).map_err(LikesError::BadRequest)
}
use crate::schema::{Schema, Table};

/// The header carrying the liking user's id.
pub const USER_HEADER: &str = "x-user-id";
/// The response header telling how `GET /posts/{post}` was served: `hit`, `stale` or `miss`.
pub const CACHE_HEADER: &str = "x-heatsink-cache";

/// Errors of the likes application.
#[derive(Debug, thiserror::Error)]
pub enum LikesError {
    /// The request is malformed (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// The post does not exist (HTTP 404).
    #[error("post {0} does not exist")]
    UnknownPost(String),
    /// The counters could not be flushed or read.
    #[error(transparent)]
    Counter(#[from] CounterStoreError),
    /// A count read through the micro-cache failed (the store's error, shared by its waiters).
    #[error(transparent)]
    Cache(#[from] CacheError<CounterStoreError>),
    /// DynamoDB refused the request or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

/// Whether a like was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LikeOutcome {
    /// The like was recorded now.
    Liked,
    /// The user had already liked the post; nothing changed.
    AlreadyLiked,
}

/// The likes API: `POST /posts/{post}/likes`, `GET /posts/{post}`.
#[derive(Debug)]
pub struct LikesApi {
    ddb: aws_sdk_dynamodb::Client,
    liked: String,
    posts: String,
    counters: Arc<CounterStore>,
    known_posts: Mutex<HashSet<String>>,
    /// Post → count, for `GET /posts/{post}`; `None`: every GET reads the counter.
    cache: Option<MicroCache<String, i64>>,
    /// Per-post and per-user admission for `POST`; `None`: every like is admitted.
    gate: Option<Gate>,
}

impl LikesApi {
    /// The API over the tables of `schema`.
    pub fn new(ddb: aws_sdk_dynamodb::Client, schema: &Schema) -> Self {
        Self {
            counters: Arc::new(CounterStore::new(
                ddb.clone(),
                schema.table_name(Table::Counters),
            )),
            liked: schema.table_name(Table::Liked),
            posts: schema.table_name(Table::Posts),
            ddb,
            known_posts: Mutex::new(HashSet::new()),
            cache: None,
            gate: None,
        }
    }

    /// Admits `POST` likes through `gate` (key = post, tenant = user): a refused like is
    /// answered 429 with `Retry-After` and nothing is written.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Serves `GET /posts/{post}` through `cache` ([`heatsink::cache`]; the Lambda uses TTL 1 s,
    /// stale until 3 s), so a hot post costs about one counter Query per second per instance.
    /// A new like through this API drops that post's entry: no count cached before the like is
    /// served afterwards (the count itself moves when the aggregator flushes the like).
    pub fn with_cache(mut self, cache: MicroCache<String, i64>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The micro-cache in front of count reads, if any.
    pub fn cache(&self) -> Option<&MicroCache<String, i64>> {
        self.cache.as_ref()
    }

    /// `None` when the like may go ahead; the 429 (or 400 for an id the gate refuses) if not.
    async fn admit(&self, post: &str, user: &str) -> Option<ApiGatewayV2httpResponse> {
        let gate = self.gate.as_ref()?;
        match gate.check(post, user).await {
            Ok(Decision::Admit) => None,
            Ok(refused @ Decision::Reject { scope, .. }) => {
                let secs = refused.retry_after_secs().unwrap_or(1);
                let which = match scope {
                    Scope::Key => format!("post {post}"),
                    Scope::Tenant => format!("user {user}"),
                };
                let mut resp = response(
                    429,
                    json!({"error": format!("too many likes for {which}; retry after {secs} s"), "retry_after": secs}),
                );
                if let Ok(v) = secs.to_string().parse() {
                    resp.headers
                        .insert(aws_lambda_events::http::header::RETRY_AFTER, v);
                }
                Some(resp)
            }
            Err(e) => Some(response(400, json!({"error": e.to_string()}))),
        }
    }

    /// Posts never disappear in this model, so a post seen once is remembered for the process.
    async fn ensure_post(&self, post: &str) -> Result<(), LikesError> {
        if self.known_posts.lock().is_ok_and(|k| k.contains(post)) {
            return Ok(());
        }
        let found = self
            .ddb
            .get_item()
            .table_name(&self.posts)
            .key("post", AttributeValue::S(post.to_owned()))
            .projection_expression("post")
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", &self.posts, e))?;
        if found.item.is_none() {
            return Err(LikesError::UnknownPost(post.to_owned()));
        }
        if let Ok(mut k) = self.known_posts.lock() {
            k.insert(post.to_owned());
        }
        Ok(())
    }

    /// Records `user` liking `post` durably; a repeated like changes nothing.
    pub async fn like(&self, user: &str, post: &str) -> Result<LikeOutcome, LikesError> {
        valid_id("user", user)?;
        valid_id("post", post)?;
        self.ensure_post(post).await?;
        let put = self
            .ddb
            .put_item()
            .table_name(&self.liked)
            .item("user", AttributeValue::S(user.to_owned()))
            .item("post", AttributeValue::S(post.to_owned()))
            // When the like became durable: the rebuilder leaves a post alone until its newest
            // like is old enough that the aggregator has flushed it (see `RebuildOptions`).
            .item(LIKED_AT, AttributeValue::N(now_ms().to_string()))
            .condition_expression("attribute_not_exists(#u)")
            .expression_attribute_names("#u", "user")
            .send()
            .await;
        match put {
            Ok(_) => {
                if let Some(cache) = &self.cache {
                    cache.invalidate(post).await;
                }
                Ok(LikeOutcome::Liked)
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(LikeOutcome::AlreadyLiked)
            }
            Err(e) => Err(AwsError::dynamodb("PutItem", &self.liked, e).into()),
        }
    }

    /// A post's like count (one Query of its counter partition).
    pub async fn count(&self, post: &str) -> Result<i64, LikesError> {
        valid_id("post", post)?;
        self.ensure_post(post).await?;
        let key = CounterKey::new(COUNTER, post).map_err(CounterStoreError::from)?;
        Ok(self.counters.read(&key).await?.total())
    }

    /// A post's like count through the micro-cache when there is one, with how it was served
    /// (`None`: no cache, read from the counter).
    pub async fn cached_count(&self, post: &str) -> Result<(i64, Option<Source>), LikesError> {
        let Some(cache) = &self.cache else {
            return Ok((self.count(post).await?, None));
        };
        valid_id("post", post)?;
        self.ensure_post(post).await?;
        let counters = Arc::clone(&self.counters);
        let read = cache
            .get_or_load(post, move |post: String| async move {
                let key = CounterKey::new(COUNTER, &post)?;
                Ok(counters.read(&key).await?.total())
            })
            .await?;
        Ok((read.value, Some(read.source)))
    }

    /// Handles one API Gateway v2 / Function URL request.
    pub async fn handle(&self, req: ApiGatewayV2httpRequest) -> ApiGatewayV2httpResponse {
        let method = req.request_context.http.method.as_str().to_owned();
        let path = req
            .raw_path
            .clone()
            .or_else(|| req.request_context.http.path.clone())
            .unwrap_or_default();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        // How a GET was served, for the `x-heatsink-cache` header (`None`: not through a cache).
        let mut served: Option<Source> = None;
        let result = match (method.as_str(), parts.as_slice()) {
            ("POST", ["posts", post, "likes"]) => {
                let user = req
                    .headers
                    .get(USER_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                if user.is_empty() {
                    Err(LikesError::BadRequest(format!(
                        "the {USER_HEADER} header names the liking user"
                    )))
                } else if let Some(refused) = self.admit(post, &user).await {
                    return refused;
                } else {
                    self.like(&user, post).await.map(|outcome| {
                        let status = if outcome == LikeOutcome::Liked {
                            201
                        } else {
                            200
                        };
                        (
                            status,
                            json!({"post": post, "user": user, "result": outcome}),
                        )
                    })
                }
            }
            ("GET", ["posts", post]) => self.cached_count(post).await.map(|(n, source)| {
                served = source;
                (200, json!({"post": post, "likes": n}))
            }),
            (_, ["posts", _, "likes"]) | (_, ["posts", _]) => {
                return response(
                    405,
                    json!({"error": format!("{method} is not allowed here")}),
                );
            }
            _ => {
                return response(
                    404,
                    json!({"error": format!("no route for {method} {path}")}),
                );
            }
        };
        match result {
            Ok((status, body)) => {
                let mut resp = response(status, body);
                if let Some(source) = served {
                    resp.headers.insert(
                        CACHE_HEADER,
                        aws_lambda_events::http::HeaderValue::from_static(source.as_header()),
                    );
                }
                resp
            }
            Err(e @ LikesError::BadRequest(_)) => response(400, json!({"error": e.to_string()})),
            Err(e @ LikesError::UnknownPost(_)) => response(404, json!({"error": e.to_string()})),
            Err(e) => {
                tracing::error!(error = %e, "likes-api request failed");
                response(500, json!({"error": "internal error; retry"}))
            }
        }
    }
}

/// A JSON response with `status`.
pub fn response(status: i64, body: Value) -> ApiGatewayV2httpResponse {
    let mut resp = ApiGatewayV2httpResponse::default();
    resp.status_code = status;
    resp.headers.insert(
        aws_lambda_events::http::header::CONTENT_TYPE,
        aws_lambda_events::http::HeaderValue::from_static("application/json"),
    );
    resp.body = Some(Body::Text(body.to_string()));
    resp
}

#[cfg(test)]
mod tests {
    use aws_lambda_events::http::{HeaderValue, Method};
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use heatsink::mocked;
    use std::collections::HashMap;

    /// DynamoDB answering: post `p9` exists, its counter holds 10 (one `fix` sub-key), and every
    /// like is new. The returned rule counts the counter Queries.
    fn ddb() -> (aws_sdk_dynamodb::Client, Rule) {
        let get = mock!(aws_sdk_dynamodb::Client::get_item).then_output(|| {
            GetItemOutput::builder()
                .item("post", AttributeValue::S("p9".into()))
                .build()
        });
        let query = mock!(aws_sdk_dynamodb::Client::query).then_compute_output(|_| {
            QueryOutput::builder()
                .items(HashMap::from([
                    ("pk".to_owned(), AttributeValue::S("likes#p9".into())),
                    ("sk".to_owned(), AttributeValue::S("fix".into())),
                    ("total".to_owned(), AttributeValue::N("10".into())),
                ]))
                .build()
        });
        let put = mock!(aws_sdk_dynamodb::Client::put_item)
            .then_output(|| PutItemOutput::builder().build());
        (mocked!(aws_sdk_dynamodb, get, query, put), query)
    }

    fn request(method: Method, path: &str) -> ApiGatewayV2httpRequest {
        let mut req = ApiGatewayV2httpRequest::default();
        req.request_context.http.method = method;
        req.raw_path = Some(path.to_owned());
        req.headers
            .insert(USER_HEADER, HeaderValue::from_static("u1"));
        req
    }

    fn served(resp: &ApiGatewayV2httpResponse) -> Option<&str> {
        resp.headers.get(CACHE_HEADER).and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn a_cached_get_queries_the_counter_once_and_a_local_like_drops_the_entry() {
        let (client, query) = ddb();
        let api =
            LikesApi::new(client, &Schema::default()).with_cache(MicroCache::builder().build());
        let first = api.handle(request(Method::GET, "/posts/p9")).await;
        assert_eq!((first.status_code, served(&first)), (200, Some("miss")));
        let second = api.handle(request(Method::GET, "/posts/p9")).await;
        assert_eq!((second.status_code, served(&second)), (200, Some("hit")));
        assert_eq!(
            query.num_calls(),
            1,
            "the second GET was answered from memory"
        );
        let like = api.handle(request(Method::POST, "/posts/p9/likes")).await;
        assert_eq!(like.status_code, 201);
        let after = api.handle(request(Method::GET, "/posts/p9")).await;
        assert_eq!(
            served(&after),
            Some("miss"),
            "a local like drops the cached count"
        );
        assert_eq!(query.num_calls(), 2);
    }

    #[tokio::test]
    async fn without_a_cache_every_get_queries_the_counter_and_has_no_cache_header() {
        let (client, query) = ddb();
        let api = LikesApi::new(client, &Schema::default());
        for _ in 0..2 {
            let resp = api.handle(request(Method::GET, "/posts/p9")).await;
            assert_eq!((resp.status_code, served(&resp)), (200, None));
        }
        assert_eq!(query.num_calls(), 2);
    }
}

//! The likes API: `POST /posts/{post}/likes` records a like durably, `GET /posts/{post}`
//! reads the count.
//!
//! A like is acknowledged only once it is durable: `liked[user, post]` is written with
//! `attribute_not_exists`, so a repeated like is idempotent and says so (201 new, 200 already
//! liked). The count is a view: the aggregator ([`crate::aggregator`](mod@crate::aggregator)) flushes it from the
//! `liked` table's change stream, and the rebuilder ([`crate::rebuild`]) repairs it. Reads go
//! through the toolkit's micro-cache, likes through its admission gate (429 with
//! `Retry-After`). Status codes: 400 malformed, 401 no verified user, 404 unknown post or
//! route, 405 wrong method, 500 (with a retry hint) when DynamoDB fails.
//!
//! # Who likes
//! The liking user is the `sub` claim of the caller's JWT as API Gateway's JWT authorizer
//! verified it (`requestContext.authorizer.jwt.claims.sub`, [`verified_user`]); nothing the
//! caller sends in a header or the body names the user. A `POST` without verified claims is 401
//! before anything else happens, so a caller cannot spend another user's admission tokens or
//! write a like in their name. The order of a `POST` is: identity (401) → ids (400) →
//! admission (429) → post exists (404) → conditional put. There is no switch to trust a header:
//! the local demo (`heatsink-demo`) calls [`LikesApi::like`] in process with the user it
//! generates, so no deployed code path can be told to believe a caller-named user.

use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::clock::now_ms;
use heatsink::counter::{CounterKey, CounterStore, CounterStoreError};
use heatsink::error::AwsError;
use heatsink::hot::Gate;
use heatsink::hot::cache::{CacheError, MicroCache, Source};
use heatsink::hot::guard::{Decision, Scope};
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

/// The JWT claim naming the liking user, as API Gateway's JWT authorizer verified it.
pub const USER_CLAIM: &str = "sub";
/// Most post ids remembered as existing per process (a bounded LRU-like cache, moka's TinyLFU):
/// about 100 bytes each, so at most ≈ 10 MB.
pub const KNOWN_POSTS_CAPACITY: u64 = 100_000;

/// The verified user of `req`: the `sub` claim the JWT authorizer put in
/// `requestContext.authorizer.jwt.claims`. `None` when the request carries no verified claims
/// (no authorizer on the route, or a direct invocation) or an empty `sub`; headers are never read.
pub fn verified_user(req: &ApiGatewayV2httpRequest) -> Option<&str> {
    req.request_context
        .authorizer
        .as_ref()?
        .jwt
        .as_ref()?
        .claims
        .get(USER_CLAIM)
        .map(String::as_str)
        .filter(|sub| !sub.is_empty())
}
/// Longest request path routed, bytes: `/posts/{post}/likes` with a [`MAX_ID_LEN`] id and room
/// to spare. A longer path is a 404 before it is split, and is never echoed back. Request
/// bodies are never read (the user comes from the verified JWT, the post from the path).
pub const MAX_PATH_BYTES: usize = MAX_ID_LEN + 32;

/// The response header telling how `GET /posts/{post}` was served: `hit`, `stale` or `miss`.
pub const CACHE_HEADER: &str = "x-heatsink-cache";

/// Errors of the likes application.
#[derive(Debug, thiserror::Error)]
pub enum LikesError {
    /// The request is malformed (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// The request carries no verified user (HTTP 401): the route's JWT authorizer put no `sub`
    /// claim in the request context.
    #[error("no verified user: send a valid JWT in the Authorization header")]
    Unauthenticated,
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
    /// Posts seen to exist (bounded: [`KNOWN_POSTS_CAPACITY`]).
    known_posts: moka::sync::Cache<String, ()>,
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
            known_posts: moka::sync::Cache::new(KNOWN_POSTS_CAPACITY),
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

    /// Serves `GET /posts/{post}` through `cache` ([`heatsink::hot::cache`]; the Lambda uses TTL 1 s,
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

    /// Posts never disappear in this model, so a post seen once is remembered (the cache is
    /// bounded; an evicted post costs one more GetItem).
    async fn ensure_post(&self, post: &str) -> Result<(), LikesError> {
        if self.known_posts.contains_key(post) {
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
        self.known_posts.insert(post.to_owned(), ());
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
            // The rebuilder recounts one post's minute through the write-sharded by-post index.
            .item(
                crate::schema::POST_SHARD,
                AttributeValue::S(
                    crate::schema::post_shard(post, user)
                        .map_err(|e| LikesError::BadRequest(e.to_string()))?,
                ),
            )
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

    /// `POST /posts/{post}/likes`: identity first, then the ids, then admission, then the like.
    /// `Ok(Err(resp))` is a refusal already shaped (429, or 400 from the gate).
    async fn post_like(
        &self,
        req: &ApiGatewayV2httpRequest,
        post: &str,
    ) -> Result<Result<(i64, Value), ApiGatewayV2httpResponse>, LikesError> {
        let user = verified_user(req).ok_or(LikesError::Unauthenticated)?;
        valid_id("user", user)?;
        valid_id("post", post)?;
        if let Some(refused) = self.admit(post, user).await {
            return Ok(Err(refused));
        }
        let outcome = self.like(user, post).await?;
        let status = if outcome == LikeOutcome::Liked {
            201
        } else {
            200
        };
        Ok(Ok((
            status,
            json!({"post": post, "user": user, "result": outcome}),
        )))
    }

    /// Handles one API Gateway v2 / Function URL request.
    pub async fn handle(&self, req: ApiGatewayV2httpRequest) -> ApiGatewayV2httpResponse {
        let method = req.request_context.http.method.as_str().to_owned();
        let path = req
            .raw_path
            .clone()
            .or_else(|| req.request_context.http.path.clone())
            .unwrap_or_default();
        if path.len() > MAX_PATH_BYTES {
            // Never split or echoed: no route is this long.
            return response(
                404,
                json!({"error": format!("no route for {method} (a path of {} bytes; routes are at most {MAX_PATH_BYTES})", path.len())}),
            );
        }
        let parts: Vec<&str> = path.trim_matches('/').splitn(4, '/').collect();
        // How a GET was served, for the `x-heatsink-cache` header (`None`: not through a cache).
        let mut served: Option<Source> = None;
        let result = match (method.as_str(), parts.as_slice()) {
            ("POST", ["posts", post, "likes"]) => match self.post_like(&req, post).await {
                Ok(Ok(outcome)) => Ok(outcome),
                Ok(Err(refused)) => return refused,
                Err(e) => Err(e),
            },
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
            Err(e @ LikesError::Unauthenticated) => {
                let mut resp = response(401, json!({"error": e.to_string()}));
                resp.headers.insert(
                    aws_lambda_events::http::header::WWW_AUTHENTICATE,
                    aws_lambda_events::http::HeaderValue::from_static("Bearer"),
                );
                resp
            }
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
    use aws_lambda_events::apigw::{
        ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
    };
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

    /// A request as API Gateway hands it over after its JWT authorizer verified `sub`.
    fn request(method: Method, path: &str) -> ApiGatewayV2httpRequest {
        signed_by(unsigned(method, path), "u1")
    }

    /// A request with no authorizer context (a route without the authorizer, or a forger).
    fn unsigned(method: Method, path: &str) -> ApiGatewayV2httpRequest {
        let mut req = ApiGatewayV2httpRequest::default();
        req.request_context.http.method = method;
        req.raw_path = Some(path.to_owned());
        req
    }

    fn signed_by(mut req: ApiGatewayV2httpRequest, sub: &str) -> ApiGatewayV2httpRequest {
        let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
        jwt.claims.insert(USER_CLAIM.to_owned(), sub.to_owned());
        let mut authorizer = ApiGatewayRequestAuthorizer::default();
        authorizer.jwt = Some(jwt);
        req.request_context.authorizer = Some(authorizer);
        req
    }

    fn status_and_error(resp: &ApiGatewayV2httpResponse) -> (i64, String) {
        let body = match &resp.body {
            Some(Body::Text(t)) => serde_json::from_str::<Value>(t).expect("json"),
            other => panic!("expected a JSON body, got {other:?}"),
        };
        (
            resp.status_code,
            body["error"].as_str().unwrap_or("").to_owned(),
        )
    }

    #[tokio::test]
    async fn a_like_is_by_the_verified_sub_claim_and_the_response_names_it() {
        let (client, _) = ddb();
        let api = LikesApi::new(client, &Schema::default());
        let resp = api
            .handle(signed_by(
                unsigned(Method::POST, "/posts/p9/likes"),
                "alice",
            ))
            .await;
        assert_eq!(resp.status_code, 201);
        let Some(Body::Text(t)) = &resp.body else {
            panic!("no body")
        };
        assert_eq!(serde_json::from_str::<Value>(t).unwrap()["user"], "alice");
    }

    #[tokio::test]
    async fn a_forged_user_header_without_verified_claims_is_401_and_writes_nothing() {
        let get = mock!(aws_sdk_dynamodb::Client::get_item).then_output(|| {
            GetItemOutput::builder()
                .item("post", AttributeValue::S("p9".into()))
                .build()
        });
        let put = mock!(aws_sdk_dynamodb::Client::put_item)
            .then_output(|| PutItemOutput::builder().build());
        let client = mocked!(aws_sdk_dynamodb, get, put);
        // The victim may like once per second: a forged request must not spend that token.
        let gate = Gate::new(
            heatsink::hot::guard::AdmissionConfig::default()
                .tenant_limit(heatsink::hot::guard::Limit::per_second(1, 1).unwrap()),
            None,
        )
        .unwrap();
        let api = LikesApi::new(client, &Schema::default()).with_gate(gate);
        let mut forged = unsigned(Method::POST, "/posts/p9/likes");
        forged
            .headers
            .insert("x-user-id", HeaderValue::from_static("victim"));
        let resp = api.handle(forged.clone()).await;
        let (status, error) = status_and_error(&resp);
        assert_eq!(status, 401, "{error}");
        assert_eq!(resp.headers["www-authenticate"], "Bearer");
        // Claims without a `sub`, or an empty one, are no identity either.
        let mut empty = forged.clone();
        empty = signed_by(empty, "");
        assert_eq!(api.handle(empty).await.status_code, 401);
        assert_eq!(
            (get.num_calls(), put.num_calls()),
            (0, 0),
            "nothing read or written"
        );
        // The victim's own token is still there: their first real like is admitted.
        let real = api
            .handle(signed_by(
                unsigned(Method::POST, "/posts/p9/likes"),
                "victim",
            ))
            .await;
        assert_eq!(real.status_code, 201);
        assert_eq!(put.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_bad_user_id_is_refused_before_admission_spends_a_token() {
        let (client, _) = ddb();
        let gate = Gate::new(
            heatsink::hot::guard::AdmissionConfig::default()
                .key_limit(heatsink::hot::guard::Limit::per_second(1, 1).unwrap()),
            None,
        )
        .unwrap();
        let api = LikesApi::new(client, &Schema::default()).with_gate(gate);
        let bad = signed_by(unsigned(Method::POST, "/posts/p9/likes"), "has space");
        assert_eq!(api.handle(bad).await.status_code, 400);
        // The post's one token per second was not spent by the refused request.
        assert_eq!(
            api.handle(request(Method::POST, "/posts/p9/likes"))
                .await
                .status_code,
            201
        );
        assert_eq!(
            api.handle(request(Method::POST, "/posts/p9/likes"))
                .await
                .status_code,
            429
        );
    }

    #[tokio::test]
    async fn a_path_past_the_bound_is_404_without_being_split_echoed_or_read_from_dynamodb() {
        let (client, query) = ddb();
        let api = LikesApi::new(client, &Schema::default());
        let longest = format!("/posts/{}/likes", "p".repeat(MAX_ID_LEN));
        assert!(longest.len() <= MAX_PATH_BYTES);
        let hostile = format!("/posts/{}", "p/".repeat(500_000));
        let resp = api.handle(request(Method::GET, &hostile)).await;
        let (status, error) = status_and_error(&resp);
        assert_eq!(status, 404);
        assert!(error.len() < 200, "{error}");
        assert!(error.contains("1000007 bytes"), "{error}");
        // Extra segments under the bound are no route either; nothing reaches DynamoDB.
        let resp = api
            .handle(request(Method::GET, "/posts/p9/likes/x/y"))
            .await;
        assert_eq!(resp.status_code, 404);
        assert_eq!(query.num_calls(), 0);
    }

    #[tokio::test]
    async fn reads_need_no_identity() {
        let (client, _) = ddb();
        let api = LikesApi::new(client, &Schema::default());
        let resp = api.handle(unsigned(Method::GET, "/posts/p9")).await;
        assert_eq!(resp.status_code, 200);
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

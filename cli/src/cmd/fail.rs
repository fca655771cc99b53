//! One-line failures: what failed, on which resource and endpoint, and what to do next.
//!
//! Every command wraps the errors of its AWS calls with a [`Target`] (service, resource, the
//! endpoint the call went to), so the operator reads e.g.
//! `stream heatsink-like-events not found at http://127.0.0.1:4568: run 'heatsink local bootstrap'
//! or check --prefix` instead of the SDK's "service error" or its `Debug` dump of the raw
//! response. SDK errors are rendered from their error code and message
//! ([`ProvideErrorMetadata`]), or from their `Display` source chain when they have no code (a
//! connection failure); never from `Debug`. Library errors already carry the chain as text, but
//! `DisplayErrorContext` appends the error's `Debug` form to it; [`one_line`] cuts that out.

use std::fmt;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;

/// The AWS services the CLI calls, with the environment variable that points each elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Amazon DynamoDB.
    DynamoDb,
    /// DynamoDB Streams.
    DynamoDbStreams,
    /// Kinesis Data Streams.
    Kinesis,
    /// Amazon EventBridge.
    EventBridge,
    /// CloudWatch (Contributor Insights reports).
    CloudWatch,
    /// Amazon SQS (the failure queues).
    Sqs,
}

impl Service {
    /// The service's name for people.
    pub fn name(self) -> &'static str {
        match self {
            Self::DynamoDb => "DynamoDB",
            Self::DynamoDbStreams => "DynamoDB Streams",
            Self::Kinesis => "Kinesis",
            Self::EventBridge => "EventBridge",
            Self::CloudWatch => "CloudWatch",
            Self::Sqs => "SQS",
        }
    }

    /// The service-specific endpoint variable of the SDK's configuration chain.
    pub fn env_var(self) -> &'static str {
        match self {
            Self::DynamoDb => "AWS_ENDPOINT_URL_DYNAMODB",
            Self::DynamoDbStreams => "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
            Self::Kinesis => "AWS_ENDPOINT_URL_KINESIS",
            Self::EventBridge => "AWS_ENDPOINT_URL_EVENTBRIDGE",
            Self::CloudWatch => "AWS_ENDPOINT_URL_CLOUDWATCH",
            Self::Sqs => "AWS_ENDPOINT_URL_SQS",
        }
    }
}

/// The endpoint a service's calls go to: its `AWS_ENDPOINT_URL_<SERVICE>`, else the config's
/// global endpoint (`AWS_ENDPOINT_URL`), else AWS itself (with the region when one is set).
pub fn endpoint(config: &aws_config::SdkConfig, service: Service) -> String {
    endpoint_from(
        std::env::var(service.env_var()).ok().as_deref(),
        config.endpoint_url(),
        config.region().map(|r| r.as_ref()),
    )
}

/// [`endpoint`] from its three inputs (a pure function, for tests).
fn endpoint_from(service_env: Option<&str>, global: Option<&str>, region: Option<&str>) -> String {
    match (service_env.filter(|s| !s.is_empty()), global, region) {
        (Some(url), _, _) | (None, Some(url), _) => url.to_owned(),
        (None, None, Some(region)) => format!("AWS {region}"),
        (None, None, None) => "AWS".to_owned(),
    }
}

/// What went wrong, as far as the next step is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The table, stream or shard does not exist there.
    NotFound,
    /// The endpoint could not be reached (refused, DNS, connect timeout).
    Unreachable,
    /// The endpoint took the call but did not answer within the call's timeout
    /// ([`heatsink::timeouts::Timeouts::CALL`]: 5 s an attempt, 15 s in all).
    TimedOut,
    /// The credentials were refused or lack a permission.
    AccessDenied,
    /// The service throttled the call.
    Throttled,
    /// Anything else.
    Other,
}

/// Classifies an error by its SDK error code, else by its text.
pub fn classify(code: Option<&str>, text: &str) -> Kind {
    const NOT_FOUND: [&str; 3] = ["ResourceNotFound", "not found", "does not exist"];
    const UNREACHABLE: [&str; 5] = [
        "Connection refused",
        "connection refused",
        "dispatch failure",
        "error trying to connect",
        "dns error",
    ];
    // The SDK's operation and attempt timeouts: "request has timed out: operation timeout (all
    // attempts including retries) occurred after 15s".
    const TIMED_OUT: [&str; 3] = ["timed out", "TimeoutError", "timeout occurred"];
    const DENIED: [&str; 8] = [
        "AccessDenied",
        "UnrecognizedClient",
        "InvalidSignature",
        "ExpiredToken",
        "InvalidClientTokenId",
        "MissingAuthenticationToken",
        "no credentials",
        "failed to load credentials",
    ];
    const THROTTLED: [&str; 4] = [
        "Throttling",
        "ProvisionedThroughputExceeded",
        "LimitExceeded",
        "RequestLimitExceeded",
    ];
    let any = |words: &[&str]| {
        words
            .iter()
            .any(|w| code.is_some_and(|c| c.contains(w)) || text.contains(w))
    };
    if any(&DENIED) {
        Kind::AccessDenied
    } else if any(&NOT_FOUND) {
        Kind::NotFound
    } else if any(&THROTTLED) {
        Kind::Throttled
    } else if any(&UNREACHABLE) {
        Kind::Unreachable
    } else if any(&TIMED_OUT) {
        Kind::TimedOut
    } else {
        Kind::Other
    }
}

/// A failure rendered as one line; what every command returns for an AWS error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    line: String,
}

impl Failure {
    /// A failure with a ready line (made one line).
    pub fn new(line: impl AsRef<str>) -> Self {
        Self {
            line: one_line(line.as_ref()),
        }
    }

    /// The line.
    #[cfg(test)]
    pub fn as_str(&self) -> &str {
        &self.line
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for Failure {}

/// Where a call went: the service, the kind and name of the resource, and the endpoint.
#[derive(Debug, Clone)]
pub struct Target {
    service: Service,
    what: &'static str,
    resource: String,
    endpoint: String,
    not_found: String,
}

/// The next step when a resource heatsink creates is missing.
pub const BOOTSTRAP_HINT: &str = "run 'heatsink local bootstrap' or check --prefix";

impl Target {
    /// A call to `service` on the `what` (`table`, `stream`, …) named `resource`, at the endpoint
    /// the configuration sends that service's calls to.
    pub fn new(
        config: &aws_config::SdkConfig,
        service: Service,
        what: &'static str,
        resource: impl Into<String>,
    ) -> Self {
        Self::at(endpoint(config, service), service, what, resource)
    }

    /// Like [`Target::new`] with the endpoint given (e.g. the demo's simulator).
    pub fn at(
        endpoint: impl Into<String>,
        service: Service,
        what: &'static str,
        resource: impl Into<String>,
    ) -> Self {
        Self {
            service,
            what,
            resource: resource.into(),
            endpoint: endpoint.into(),
            not_found: BOOTSTRAP_HINT.to_owned(),
        }
    }

    /// The next step when the resource is not found (default: [`BOOTSTRAP_HINT`]).
    pub fn if_missing(mut self, next_step: impl Into<String>) -> Self {
        self.not_found = next_step.into();
        self
    }

    /// A failure of `action` (e.g. `list shards of`) from any error, read from its source chain.
    pub fn fail(&self, action: &str, err: &(dyn std::error::Error + 'static)) -> Failure {
        let detail = chain(err);
        self.render(action, classify(None, &detail), &detail)
    }

    /// A failure of `action` from an SDK error: its error code and message when it has them.
    pub fn sdk<E>(&self, action: &str, err: &E) -> Failure
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let detail = match (err.code(), err.message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.to_owned(),
            _ => chain(err),
        };
        self.render(action, classify(err.code(), &detail), &detail)
    }

    /// The line for a failure of this kind.
    fn render(&self, action: &str, kind: Kind, detail: &str) -> Failure {
        let (what, name, at) = (self.what, &self.resource, &self.endpoint);
        let service = self.service.name();
        let detail = one_line(detail);
        Failure::new(match kind {
            Kind::NotFound => format!("{what} {name} not found at {at}: {}", self.not_found),
            Kind::Unreachable => format!(
                "cannot reach {service} at {at} to {action} {what} {name} ({detail}): start the local stack with 'localstack/stack up' or check {} / AWS_ENDPOINT_URL",
                self.service.env_var()
            ),
            Kind::TimedOut => format!(
                "{service} at {at} did not answer in time to {action} {what} {name} ({detail}): the call timed out (5 s an attempt, 15 s in all); check that the endpoint is up and reachable ({} / AWS_ENDPOINT_URL), then run it again",
                self.service.env_var()
            ),
            Kind::AccessDenied => format!(
                "{service} at {at} refused to {action} {what} {name} ({detail}): check the credentials (AWS_PROFILE or AWS_ACCESS_KEY_ID) and their IAM permissions"
            ),
            Kind::Throttled => format!(
                "{service} at {at} throttled {action} {what} {name} ({detail}): wait a little and run it again, or raise the capacity"
            ),
            Kind::Other => format!(
                "could not {action} {what} {name} at {at}: {detail}; run again with RUST_LOG=debug for the SDK's log"
            ),
        })
    }
}

/// An error and its sources as `outer: inner: …`, from `Display` only, made one line.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let next = e.to_string();
        // Library errors often repeat their source's text; say it once.
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    one_line(&text)
}

/// `text` on one line: newlines folded, and the `Debug` dump that `DisplayErrorContext` appends
/// (` (ServiceError(ServiceError { … raw: Response { … } }))`) cut out.
pub fn one_line(text: &str) -> String {
    const DUMPS: [&str; 5] = [
        "ServiceError(",
        "DispatchFailure(",
        "TimeoutError(",
        "ResponseError(",
        "ConstructionFailure(",
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = DUMPS
        .iter()
        .filter_map(|d| rest.find(&format!("({d}")))
        .min()
    {
        out.push_str(rest[..start].trim_end());
        rest = &rest[start + balanced_len(&rest[start..])..];
    }
    out.push_str(rest);
    let folded: Vec<&str> = out.split_whitespace().collect();
    folded.join(" ")
}

/// The length of the parenthesised group `text` starts with (quote-aware), or all of `text`.
fn balanced_len(text: &str) -> usize {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        match (in_str, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => in_str = false,
            (true, false, _) => {}
            (false, _, '"') => in_str = true,
            (false, _, '(') => depth += 1,
            (false, _, ')') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// What kind of resource a call of `service` on `resource` was about, for the line.
fn resource_kind(service: Service, resource: &str) -> &'static str {
    match service {
        _ if resource.starts_with("shardId-") => "shard",
        Service::DynamoDb => "table",
        Service::DynamoDbStreams | Service::Kinesis => "stream",
        Service::EventBridge => "event bus",
        Service::CloudWatch => "insight rule",
        Service::Sqs => "queue",
    }
}

/// One AWS call an error names: the service, the API operation and the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    /// The service.
    pub service: Service,
    /// The API operation (`PutItem`).
    pub operation: &'a str,
    /// The table, stream, shard, rule or bus.
    pub resource: &'a str,
}

/// The AWS call a library error was caused by: the first `{service} {operation} on {resource}
/// failed: …` in its one-line text, which is how [`AwsError`](heatsink::error::AwsError) displays itself. (The areas wrap
/// it `#[error(transparent)]`, which hides the `AwsError` value from the source chain but keeps
/// its text; a test pins the format to `AwsError`'s own.)
pub fn aws_call(text: &str) -> Option<Call<'_>> {
    const SERVICES: [Service; 5] = [
        Service::DynamoDbStreams,
        Service::DynamoDb,
        Service::Kinesis,
        Service::EventBridge,
        Service::CloudWatch,
    ];
    let parse = |service: Service, at: usize| -> Option<Call<'_>> {
        let rest = text[at..].strip_prefix(service.name())?.strip_prefix(' ')?;
        let (operation, rest) = rest.split_once(' ')?;
        let (resource, rest) = rest.strip_prefix("on ")?.split_once(' ')?;
        let camel = operation.starts_with(|c: char| c.is_ascii_uppercase())
            && operation.chars().all(|c| c.is_ascii_alphanumeric());
        (camel && !resource.is_empty() && rest.starts_with("failed: ")).then_some(Call {
            service,
            operation,
            resource,
        })
    };
    text.char_indices()
        .filter(|(i, _)| *i == 0 || text[..*i].ends_with([' ', '(', ':']))
        .find_map(|(i, _)| SERVICES.iter().find_map(|s| parse(*s, i)))
}

/// The endpoint `service`'s calls go to, read from the environment the way the SDK's
/// configuration chain reads it (for errors rendered where no `SdkConfig` is at hand).
pub fn env_endpoint(service: Service) -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION"));
    endpoint_from(
        var(service.env_var()).as_deref(),
        var("AWS_ENDPOINT_URL").as_deref(),
        region.as_deref(),
    )
}

/// A command's error as a [`Failure`]: a `Failure` stays as it is; an error an AWS call caused
/// (see [`aws_call`]) becomes that call's line (service, resource, endpoint, next step),
/// with `action` (e.g. `split a range of`) or, without one, the call's operation; any other error
/// (a library refusal, which names its resource and the command to run next) its one-line chain.
pub fn failure(
    endpoint: impl Fn(Service) -> String,
    action: Option<&str>,
    err: &(dyn std::error::Error + 'static),
) -> Failure {
    if let Some(done) = err.downcast_ref::<Failure>() {
        return done.clone();
    }
    let text = chain(err);
    match aws_call(&text) {
        Some(call) => {
            let operation = format!("call {} on", call.operation);
            let what = resource_kind(call.service, call.resource);
            Target::at(endpoint(call.service), call.service, what, call.resource)
                .fail(action.unwrap_or(&operation), err)
        }
        None => Failure::new(text),
    }
}

/// [`failure`] with the endpoints of `config`.
pub fn of(
    config: &aws_config::SdkConfig,
    action: &str,
    err: &(dyn std::error::Error + 'static),
) -> Failure {
    failure(|s| endpoint(config, s), Some(action), err)
}

/// Any error on one line: the last line of defence in `main`, which has no `SdkConfig` and
/// reads the endpoints from the environment ([`failure`]).
pub fn render_any(err: &(dyn std::error::Error + 'static)) -> String {
    failure(env_endpoint, None, err).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "service error: ResourceNotFoundException: Stream nope under account 000000000000 not found. (ServiceError(ServiceError { source: ResourceNotFoundException(ResourceNotFoundException { message: Some(\"Stream nope (not) found\"), meta: ErrorMetadata { code: Some(\"ResourceNotFoundException\") } }), raw: Response { status: StatusCode(400), headers: Headers { headers: {} }, body: SdkBody { inner: Once(Some(b\"{}\")), retryable: true } } }))";

    fn local(service: Service, what: &'static str, name: &str) -> Target {
        Target::at("http://127.0.0.1:4568", service, what, name)
    }

    #[derive(Debug)]
    struct Text(&'static str);
    impl fmt::Display for Text {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Text {}

    fn assert_clean(line: &str) {
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(!line.contains("ServiceError {"), "{line}");
        assert!(!line.contains("raw:"), "{line}");
    }

    #[test]
    fn not_found_names_the_resource_the_endpoint_and_bootstrap() {
        let f = local(Service::Kinesis, "stream", "heatsink-like-events")
            .fail("list shards of", &Text(DUMP));
        assert_eq!(
            f.as_str(),
            "stream heatsink-like-events not found at http://127.0.0.1:4568: run 'heatsink local bootstrap' or check --prefix"
        );
        assert_clean(f.as_str());
    }

    #[test]
    fn every_kind_is_one_line_with_the_resource_and_a_next_step() {
        let cases = [
            (DUMP, "heatsink local bootstrap"),
            (
                "dispatch failure: io error: error trying to connect: tcp connect error: Connection refused (os error 111) (DispatchFailure(DispatchFailure { source: ConnectorError { kind: Io, source: hyper_util::client::legacy::Error(Connect, ConnectError(\"tcp connect error\", Os { code: 111 })) } }))",
                "localstack/stack up",
            ),
            (
                "service error: UnrecognizedClientException: The security token included in the request is invalid.\n (ServiceError(ServiceError { source: Unhandled(Unhandled { source: ErrorMetadata { code: Some(\"UnrecognizedClientException\") } }), raw: Response { status: StatusCode(400) } }))",
                "credentials",
            ),
            (
                "ProvisionedThroughputExceededException: Rate exceeded",
                "run it again",
            ),
            ("ValidationException: bad\nrequest", "RUST_LOG=debug"),
            (
                "DynamoDB GetItem on heatsink-counters failed: request has timed out: operation timeout (all attempts including retries) occurred after 15s",
                "the call timed out (5 s an attempt, 15 s in all); check that the endpoint is up",
            ),
        ];
        for (text, next) in cases {
            let f =
                local(Service::DynamoDb, "table", "heatsink-counters").fail("read", &Text(text));
            let line = f.as_str();
            assert_clean(line);
            assert!(line.contains("heatsink-counters"), "{line}");
            assert!(line.contains(next), "{line}");
            assert!(
                line.contains("http://127.0.0.1:4568") || line.contains("not found at"),
                "{line}"
            );
        }
    }

    #[test]
    fn sdk_errors_render_their_code_and_message() {
        use aws_sdk_dynamodb::error::SdkError;
        use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
        use aws_sdk_dynamodb::types::error::ResourceNotFoundException;
        let err: SdkError<DescribeTableError, ()> = SdkError::service_error(
            DescribeTableError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .message("Requested resource not found")
                    .build(),
            ),
            (),
        );
        let f = local(Service::DynamoDb, "table", "heatsink-liked")
            .if_missing("check --table")
            .sdk("describe", &err);
        assert_eq!(
            f.as_str(),
            "table heatsink-liked not found at http://127.0.0.1:4568: check --table"
        );
        let denied: SdkError<DescribeTableError, ()> = SdkError::service_error(
            DescribeTableError::generic(
                aws_sdk_dynamodb::error::ErrorMetadata::builder()
                    .code("AccessDeniedException")
                    .message("not authorized to perform dynamodb:DescribeTable")
                    .build(),
            ),
            (),
        );
        let line = local(Service::DynamoDb, "table", "t")
            .sdk("describe", &denied)
            .to_string();
        assert!(
            line.contains("AccessDeniedException: not authorized") && line.contains("credentials"),
            "{line}"
        );
        assert_clean(&line);
    }

    #[test]
    fn debug_dumps_are_cut_out_and_the_rest_is_kept() {
        assert_eq!(
            one_line(
                "Kinesis call on s failed: boom (ServiceError(ServiceError { raw: \"a)b\" })) after"
            ),
            "Kinesis call on s failed: boom after"
        );
        assert_eq!(one_line("a\n  b"), "a b");
        assert_eq!(one_line("keep (this) text"), "keep (this) text");
    }

    use heatsink::error::AwsError;

    fn aws_not_found(operation: &'static str, table: &str) -> AwsError {
        use aws_sdk_dynamodb::error::SdkError;
        use aws_sdk_dynamodb::operation::get_item::GetItemError;
        use aws_sdk_dynamodb::types::error::ResourceNotFoundException;
        let err: SdkError<GetItemError, ()> = SdkError::service_error(
            GetItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .message("Requested resource not found")
                    .build(),
            ),
            (),
        );
        AwsError::dynamodb(operation, table, err)
    }

    #[test]
    fn a_library_error_an_aws_call_caused_names_the_call_its_resource_and_endpoint() {
        let err = heatsink::slots::MoveError::Aws(aws_not_found("GetItem", "heatsink-slots"));
        let at = |_: Service| "http://127.0.0.1:4566".to_owned();
        let line = failure(at, None, &err).to_string();
        assert_eq!(
            line,
            "table heatsink-slots not found at http://127.0.0.1:4566: run 'heatsink local bootstrap' or check --prefix"
        );
        // Any other kind keeps the call's operation as what failed.
        let denied = {
            use aws_sdk_dynamodb::error::SdkError;
            use aws_sdk_dynamodb::operation::put_item::PutItemError;
            let e: SdkError<PutItemError, ()> = SdkError::service_error(
                PutItemError::generic(
                    aws_sdk_dynamodb::error::ErrorMetadata::builder()
                        .code("AccessDeniedException")
                        .message("no")
                        .build(),
                ),
                (),
            );
            heatsink::slots::MoveError::Aws(AwsError::dynamodb("PutItem", "posts", e))
        };
        let line = failure(at, None, &denied).to_string();
        assert!(
            line.starts_with(
                "DynamoDB at http://127.0.0.1:4566 refused to call PutItem on table posts"
            ) && line.contains("credentials"),
            "{line}"
        );
        let line = failure(at, Some("split a range of"), &denied).to_string();
        assert!(
            line.contains("refused to split a range of table posts"),
            "{line}"
        );
        assert_clean(&line);
    }

    #[test]
    fn the_call_is_read_from_aws_errors_own_text_in_any_area_error() {
        let aws = aws_not_found("GetItem", "heatsink-slots");
        for text in [
            aws.to_string(),
            heatsink::slots::MoveError::Aws(aws_not_found("GetItem", "heatsink-slots")).to_string(),
            format!("reshard journal: {aws}"),
        ] {
            assert_eq!(
                aws_call(&text),
                Some(Call {
                    service: Service::DynamoDb,
                    operation: "GetItem",
                    resource: "heatsink-slots"
                }),
                "{text}"
            );
        }
        let streams =
            "DynamoDB Streams GetRecords on shardId-0001 failed: ExpiredIteratorException: x";
        let call = aws_call(streams).expect("a call");
        assert_eq!(
            (call.service, call.resource),
            (Service::DynamoDbStreams, "shardId-0001")
        );
        assert_eq!(resource_kind(call.service, call.resource), "shard");
        for not_a_call in [
            "the slot directory heatsink-slots is empty; run `heatsink slots init --owner TABLE`",
            "DynamoDB is slow on Mondays failed: no",
            "a Kinesis stream name on the line failed: no",
            "Kinesis stream on like-events failed: twice",
        ] {
            assert_eq!(aws_call(not_a_call), None, "{not_a_call}");
        }
    }

    #[test]
    fn refusals_and_ready_failures_keep_their_own_line() {
        let refusal = heatsink::slots::MoveError::NoSuchMove {
            id: "m-9".into(),
            table: "heatsink-slots".into(),
        };
        let at = |_: Service| unreachable!("no AWS call, no endpoint");
        assert_eq!(
            failure(at, None, &refusal).to_string(),
            "no move m-9 in heatsink-slots; see `heatsink move list --json`"
        );
        let ready = Failure::new("already\none line");
        assert_eq!(failure(at, None, &ready).to_string(), "already one line");
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(ready);
        assert_eq!(render_any(&*boxed), "already one line");
    }

    #[test]
    fn the_endpoint_prefers_the_service_variable_then_the_global_one_then_aws() {
        let f = endpoint_from;
        assert_eq!(f(Some("http://a"), Some("http://b"), None), "http://a");
        assert_eq!(f(Some(""), Some("http://b"), None), "http://b");
        assert_eq!(f(None, None, Some("eu-west-1")), "AWS eu-west-1");
        assert_eq!(f(None, None, None), "AWS");
    }
}

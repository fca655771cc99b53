//! One pagination path: the SDK's paginators (`query().….into_paginator().items().send()`),
//! which follow `LastEvaluatedKey` (an empty one ends the read, a repeated one stops it) so no
//! adapter writes that loop. [`read_all`] is the common case: every item into a `Vec`, refused
//! past a bound instead of growing without one. A read that holds its cursor between pages
//! (resumable, persisted, retried page by page) says why with a `// paged by hand:` comment, which
//! the layer's lint requires.

use aws_smithy_async::future::pagination_stream::PaginationStream;

/// Why [`read_all`] stopped.
#[derive(Debug)]
pub(crate) enum Paged<E> {
    /// A page's call failed.
    Call(E),
    /// There were more than this many items: nothing is returned.
    Over(usize),
}

impl<E> Paged<E> {
    /// One error of the caller's area from either case.
    pub(crate) fn into_error<A>(
        self,
        call: impl FnOnce(E) -> A,
        over: impl FnOnce(usize) -> A,
    ) -> A {
        match self {
            Paged::Call(e) => call(e),
            Paged::Over(bound) => over(bound),
        }
    }
}

/// Every item of a paginated read, at most `bound` of them; more is [`Paged::Over`].
pub(crate) async fn read_all<T, E>(
    mut items: PaginationStream<Result<T, E>>,
    bound: usize,
) -> Result<Vec<T>, Paged<E>> {
    let mut out = Vec::new();
    while let Some(item) = items.next().await {
        let item = item.map_err(Paged::Call)?;
        if out.len() == bound {
            return Err(Paged::Over(bound));
        }
        out.push(item);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::ddb::apply::QueryKey;
    use crate::ddb::key_condition::KeyCondition;
    use crate::ddb::value::{Item, n, s};

    fn page(items: &[u8], next: Option<u8>) -> QueryOutput {
        QueryOutput::builder()
            .set_items(Some(
                items
                    .iter()
                    .map(|i| Item::from([("sk".to_owned(), n(*i))]))
                    .collect(),
            ))
            .set_last_evaluated_key(next.map(|k| Item::from([("sk".to_owned(), n(k))])))
            .build()
    }

    fn ddb() -> aws_sdk_dynamodb::Client {
        let first = mock!(aws_sdk_dynamodb::Client::query)
            .match_requests(|r| r.exclusive_start_key().is_none())
            .then_output(|| page(&[1, 2], Some(2)));
        let second = mock!(aws_sdk_dynamodb::Client::query)
            .match_requests(|r| r.exclusive_start_key().is_some())
            .then_output(|| page(&[3], None));
        crate::mocked!(aws_sdk_dynamodb, first, second)
    }

    /// Two pages read whole; a bound below their items refuses the read instead of cutting it.
    #[tokio::test]
    async fn smithy_mock_every_page_is_read_and_a_bound_refuses_more() {
        let query = || {
            ddb()
                .query()
                .table_name("t")
                .query_key(&KeyCondition::partition("pk", s("a")))
                .into_paginator()
                .items()
                .send()
        };
        let all = read_all(query(), 3).await.expect("three items");
        let sks: Vec<_> = all.iter().filter_map(|i| i.get("sk").cloned()).collect();
        assert_eq!(sks, [n(1u8), n(2u8), n(3u8)]);
        assert!(matches!(read_all(query(), 2).await, Err(Paged::Over(2))));
    }
}

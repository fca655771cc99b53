//! One DynamoDB Streams reader: an iterator at a position of a shard
//! ([`iterator`]), and one page of records from it ([`page`]), each one call whose error names
//! the stream and shard. The consumer's source, the slot mover's tails, the redrive and the
//! aggregator's sequence lookup read through it; what each then does with the records (the
//! consumer's JSON, the mover's items, the mapper's changes) and how it recovers (re-issue,
//! retry within a deadline, report) stays its own, as their rules differ.
//!
//! DynamoDB Streams allows 5 `GetRecords` calls per second per shard and 1,000 records a call;
//! the callers pace themselves.

use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;

use crate::error::AwsError;

const SERVICE: &str = "DynamoDB Streams";

/// Where in a shard an iterator starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position<'a> {
    /// The oldest record still kept (24 h retention).
    TrimHorizon,
    /// After the newest record: only records written from now on.
    Latest,
    /// Just after this sequence number.
    After(&'a str),
    /// At this sequence number.
    At(&'a str),
}

/// An iterator on `shard` of stream `arn` at `at`; `None` when the service answers without
/// one. An error names `<arn>/<shard>`.
pub(crate) async fn iterator(
    client: &aws_sdk_dynamodbstreams::Client,
    arn: &str,
    shard: &str,
    at: Position<'_>,
) -> Result<Option<String>, AwsError> {
    let req = client.get_shard_iterator().stream_arn(arn).shard_id(shard);
    let req = match at {
        Position::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
        Position::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
        Position::After(seq) => req
            .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
            .sequence_number(seq),
        Position::At(seq) => req
            .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
            .sequence_number(seq),
    };
    let out = req
        .send()
        .await
        .map_err(|e| AwsError::new(SERVICE, "GetShardIterator", format!("{arn}/{shard}"), e))?;
    Ok(out.shard_iterator)
}

/// One page of at most `limit` records from `iterator` (its next iterator inside: `None` at
/// a closed shard's end). `resource` names what is read in an error (the shard, or the stream
/// when the caller holds only the iterator).
pub(crate) async fn page(
    client: &aws_sdk_dynamodbstreams::Client,
    iterator: &str,
    limit: i32,
    resource: &str,
) -> Result<GetRecordsOutput, AwsError> {
    client
        .get_records()
        .shard_iterator(iterator)
        .limit(limit)
        .send()
        .await
        .map_err(|e| AwsError::new(SERVICE, "GetRecords", resource, e))
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorOutput;
    use aws_smithy_mocks::mock;

    use super::*;

    /// smithy-mock: each position asks for its iterator type with its sequence number.
    #[tokio::test]
    async fn smithy_mock_each_position_asks_for_its_iterator_type() {
        for (at, kind, seq) in [
            (Position::TrimHorizon, ShardIteratorType::TrimHorizon, None),
            (Position::Latest, ShardIteratorType::Latest, None),
            (
                Position::After("42"),
                ShardIteratorType::AfterSequenceNumber,
                Some("42"),
            ),
            (
                Position::At("7"),
                ShardIteratorType::AtSequenceNumber,
                Some("7"),
            ),
        ] {
            let rule = mock!(aws_sdk_dynamodbstreams::Client::get_shard_iterator)
                .match_requests(move |r| {
                    r.shard_iterator_type() == Some(&kind)
                        && r.sequence_number() == seq
                        && r.shard_id() == Some("shardId-1")
                })
                .then_output(|| {
                    GetShardIteratorOutput::builder()
                        .shard_iterator("it")
                        .build()
                });
            let client = crate::mocked!(aws_sdk_dynamodbstreams, rule);
            let it = iterator(&client, "arn:s", "shardId-1", at)
                .await
                .expect("iterator");
            assert_eq!(it.as_deref(), Some("it"), "{at:?}");
        }
    }
}

//! The like-event mapper: which counter a `liked` change moves, and by how much.
//!
//! A new item in `liked` is +1 on `likes#<post>`, a removed one −1, a modification 0 (the
//! record still advances the writer's sequence number). Records without the attributes of a
//! like, or with an id the API would refuse, are unusable: the batch fails from them.

use heatsink::counter::CounterKey;
use heatsink::counter::aggregate::{ChangeMapper, Unusable, image_and_delta, image_time_ms};
use serde_json::Value;

use crate::id;

/// The counter name of a post's likes (`likes#<post>`).
pub const COUNTER: &str = "likes";
/// The `liked` attribute holding when the like was stored, Unix milliseconds.
pub const LIKED_AT: &str = "liked_at";

/// One like event read from a change record: +1 for a new like, −1 for a removed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LikeEvent {
    /// The post.
    pub post: String,
    /// +1 or −1 (0 for a modification that is neither).
    pub delta: i64,
}

fn attr_s(image: &Value, attr: &str) -> Option<String> {
    image.get(attr)?.get("S")?.as_str().map(str::to_owned)
}

/// Reads a like event from DynamoDB change-record JSON (`eventName`, `dynamodb.NewImage/OldImage`).
pub fn like_event(record: &Value) -> Result<LikeEvent, Unusable> {
    let bad = |reason: &str| Unusable::new(reason);
    let (image, delta) = image_and_delta(record)?;
    let post = attr_s(image, "post").ok_or_else(|| bad("`post` missing or not a string"))?;
    attr_s(image, "user").ok_or_else(|| bad("`user` missing or not a string"))?;
    id::check("post", &post).map_err(|e| bad(&e))?;
    Ok(LikeEvent { post, delta })
}

/// The photo app's [`ChangeMapper`]: [`like_event`] onto `likes#<post>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LikeMapper;

impl ChangeMapper for LikeMapper {
    fn map(&self, change: &Value) -> Result<Option<(CounterKey, i64)>, Unusable> {
        let ev = like_event(change)?;
        let key = CounterKey::new(COUNTER, &ev.post).map_err(|e| Unusable::new(e.to_string()))?;
        Ok(Some((key, ev.delta)))
    }

    /// `liked_at`: the time bucket a like is counted in and recounted from.
    fn event_ms(&self, change: &Value) -> Option<u64> {
        image_time_ms(change, LIKED_AT)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn inserts_count_up_removals_down_and_modifications_not_at_all() {
        let change = |name: &str, image: &str| json!({"eventName": name, "dynamodb": {image: {"post": {"S": "p9"}, "user": {"S": "u1"}}}});
        let delta = |c: Value| {
            LikeMapper
                .map(&c)
                .expect("a like")
                .map(|(k, d)| (k.to_string(), d))
        };
        assert_eq!(
            delta(change("INSERT", "NewImage")),
            Some(("likes#p9".into(), 1))
        );
        assert_eq!(
            delta(change("REMOVE", "OldImage")),
            Some(("likes#p9".into(), -1))
        );
        assert_eq!(
            delta(change("MODIFY", "NewImage")),
            Some(("likes#p9".into(), 0))
        );
    }

    #[test]
    fn a_record_that_is_not_a_like_is_unusable() {
        for bad in [
            json!({"dynamodb": {}}),
            json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"post": {"S": "p9"}}}}),
            json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"post": {"S": "p 9"}, "user": {"S": "u"}}}}),
            json!({"eventName": "INSERT", "dynamodb": {}}),
        ] {
            assert!(LikeMapper.map(&bad).is_err(), "{bad}");
        }
    }
}

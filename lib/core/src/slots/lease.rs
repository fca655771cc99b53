//! One controller per move: the move's lease (holder, expiry, fencing token).
//!
//! `move start`, `resume`, `abort` and `rollback` each take the lease before their first
//! write, with a conditional write on the token they read ([`take`] decides; the adapter
//! writes `token + 1` under `token = :read`, so two takers cannot both win). A second
//! controller is refused with the holder and when its lease ends. Every later write of the
//! holder (record saves, the fence, the flip, purge batches) is conditional on its token, so a
//! controller that was paused past its expiry and then wakes up is refused on its next write
//! instead of acting on a move another controller now runs. The expiry only lets another
//! controller *take over*; it never authorizes a delete by itself.

use serde::{Deserialize, Serialize};

/// A move's lease as stored with its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it (`host:pid:random`, unique per controller process).
    pub holder: String,
    /// Until when (ms since the epoch); after it another controller may take it over.
    pub until_ms: u64,
    /// The fencing token: +1 with every take, never reused.
    pub token: u64,
}

/// Why a lease was not granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "move {move_id} is run by {holder} (lease until {until_ms} ms since the epoch, {left_ms} ms from now); wait for it to finish or for its lease to end, then run the command again"
)]
pub struct Held {
    /// The move.
    pub move_id: String,
    /// The controller that holds it.
    pub holder: String,
    /// When its lease ends (ms since the epoch).
    pub until_ms: u64,
    /// How long that is from now.
    pub left_ms: u64,
}

/// Whether `me` may take the lease `current` (as read, `None`: never taken) at `now_ms`, for
/// `ttl_ms`: when nobody holds it, when it has expired, or when `me` holds it already. The new
/// lease carries the next token.
pub fn take(
    move_id: &str,
    current: Option<&Lease>,
    me: &str,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<Lease, Held> {
    let token = match current {
        None => 1,
        Some(l) if l.holder == me || l.until_ms <= now_ms => l.token.saturating_add(1),
        Some(l) => {
            return Err(Held {
                move_id: move_id.to_owned(),
                holder: l.holder.clone(),
                until_ms: l.until_ms,
                left_ms: l.until_ms.saturating_sub(now_ms),
            });
        }
    };
    Ok(Lease {
        holder: me.to_owned(),
        until_ms: now_ms.saturating_add(ttl_ms),
        token,
    })
}

/// Whether a lease taken or renewed at `renewed_ms` for `ttl_ms` is due for renewal at
/// `now_ms`: a third of the way through, so two renewals can fail before it lapses.
pub fn renew_due(renewed_ms: u64, now_ms: u64, ttl_ms: u64) -> bool {
    now_ms.saturating_sub(renewed_ms) >= ttl_ms / 3
}

/// The lease after `lease` released by its holder: expired now, the token kept (the next
/// taker gets the next one).
pub fn released(lease: &Lease) -> Lease {
    Lease {
        until_ms: 0,
        ..lease.clone()
    }
}

/// The first of `leases` (move id, lease) still running at `now_ms`, as the refusal a command
/// that must not act beside a running controller gives (`heatsink move repair-fences`): a
/// lease runs until its `until_ms` (the instant [`take`] lets another controller in). A
/// released or expired lease does not hold anything back.
pub fn running<'a>(
    leases: impl IntoIterator<Item = (&'a str, &'a Lease)>,
    now_ms: u64,
) -> Option<Held> {
    leases
        .into_iter()
        .find(|(_, l)| l.until_ms > now_ms)
        .map(|(id, l)| Held {
            move_id: id.to_owned(),
            holder: l.holder.clone(),
            until_ms: l.until_ms,
            left_ms: l.until_ms - now_ms,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_second_controller_is_refused_until_the_lease_ends() {
        let a = take("m", None, "a", 1_000, 500).expect("free");
        assert_eq!((a.token, a.until_ms), (1, 1_500));
        let held = take("m", Some(&a), "b", 1_200, 500).expect_err("held");
        assert_eq!((held.holder.as_str(), held.left_ms), ("a", 300));
        assert!(held.to_string().contains("run by a"), "{held}");
        let b = take("m", Some(&a), "b", 1_500, 500).expect("expired");
        assert_eq!(b.token, 2);
        let again = take("m", Some(&b), "b", 1_600, 500).expect("holder renews");
        assert_eq!(again.token, 3);
        let free = take("m", Some(&released(&again)), "c", 1_601, 500).expect("released");
        assert_eq!(free.token, 4);
        assert!(!renew_due(1_000, 1_100, 600) && renew_due(1_000, 1_200, 600));
    }

    #[test]
    fn only_a_lease_still_running_holds_a_repair_back() {
        let a = take("m1", None, "a", 1_000, 500).expect("free");
        let done = released(&take("m2", None, "b", 1_000, 500).expect("free"));
        let leases = [("m2", &done), ("m1", &a)];
        let held = running(leases, 1_200).expect("m1 runs");
        assert_eq!(
            (held.move_id.as_str(), held.holder.as_str(), held.left_ms),
            ("m1", "a", 300)
        );
        // The instant `take` lets another controller in, nothing holds the repair back.
        assert_eq!(running(leases, 1_500), None);
        assert_eq!(running([("m2", &done)], 1), None);
    }

    proptest! {
        /// Controllers taking the lease at rising times (each take a compare-and-set on the
        /// token read): at any instant at most one unexpired lease, and tokens only rise, so
        /// every write conditional on a token is from the latest taker.
        #[test]
        fn at_most_one_controller_holds_the_lease_and_tokens_only_rise(
            tries in prop::collection::vec((0u8..4, 0u64..400, any::<bool>()), 1..60),
            ttl in 1u64..500,
        ) {
            let mut stored: Option<Lease> = None;
            let mut now = 0u64;
            let mut grants: Vec<(String, u64, u64)> = vec![]; // holder, from, until
            let mut last_token = 0u64;
            for (who, dt, release) in tries {
                now += dt;
                let me = format!("c{who}");
                if release && stored.as_ref().is_some_and(|l| l.holder == me && l.until_ms > now) {
                    let l = released(stored.as_ref().expect("held"));
                    if let Some(g) = grants.last_mut() { g.2 = now; }
                    stored = Some(l);
                    continue;
                }
                if let Ok(l) = take("m", stored.as_ref(), &me, now, ttl) {
                    prop_assert!(l.token > last_token);
                    last_token = l.token;
                    // No other controller's lease is still running.
                    if let Some((h, _, until)) = grants.last() {
                        prop_assert!(h == &me || *until <= now, "{} took it from {} before {}", me, h, until);
                    }
                    grants.push((me, now, l.until_ms));
                    stored = Some(l);
                }
            }
        }
    }
}

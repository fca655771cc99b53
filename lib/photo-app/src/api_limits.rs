//! The likes API's default admission limits, read from the environment with checked arithmetic.
//!
//! Two defaults apply to every `POST` (each Lambda instance keeps its own buckets):
//! - per user (`sub` claim): `HEATSINK_USER_LIKES_PER_SECOND`, default 10/s, burst 2× that;
//! - per post: `HEATSINK_POST_LIKES_PER_SECOND`, default 2,000/s, burst 2× that.
//!
//! What bounds the total: each instance admits at most the per-post rate for one post, and the
//! stack caps likes-api's concurrency (reserved concurrency 50 by default), so one post takes at
//! most 50 × 2,000 = 100,000 likes/s before the HTTP API's stage throttle (20,000 requests/s,
//! burst 5,000) — the stage throttle is the binding bound on the total. There is no CloudFront
//! (and so no WAF) in the stacks; put one in front if you need per-IP limits.
//!
//! A value that is not a number, is 0, or whose burst (2× the rate) overflows `u32` is a
//! [`LimitsError`] naming the variable; the function fails its cold start with that message
//! instead of crash-looping on an arithmetic panic.
//!
//! ```
//! use heatsink_photo_app::api_limits::LikesLimits;
//! let limits = LikesLimits::from_lookup(|name| (name == "HEATSINK_POST_LIKES_PER_SECOND").then(|| "500".to_owned()))?;
//! assert_eq!((limits.per_user, limits.per_post), (10, 500));
//! // Past u32 is refused when read; a rate whose 2× burst overflows u32 when the limits are built.
//! assert!(LikesLimits::from_lookup(|_| Some("4294967296".to_owned())).is_err());
//! assert!(LikesLimits::from_lookup(|_| Some("4294967295".to_owned()))?.admission().is_err());
//! # Ok::<(), heatsink_photo_app::api_limits::LimitsError>(())
//! ```

use heatsink::hot::guard::{AdmissionConfig, GuardError, Limit};

/// The variable holding the per-user rate.
pub const USER_LIKES_PER_SECOND: &str = "HEATSINK_USER_LIKES_PER_SECOND";
/// The variable holding the per-post rate.
pub const POST_LIKES_PER_SECOND: &str = "HEATSINK_POST_LIKES_PER_SECOND";
/// Per-user likes per second when unset.
pub const DEFAULT_USER_LIKES_PER_SECOND: u32 = 10;
/// Per-post likes per second (per instance) when unset.
pub const DEFAULT_POST_LIKES_PER_SECOND: u32 = 2_000;

/// A limit variable that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// Not a whole number that fits `u32`.
    #[error("{name}={value:?} is not a whole number of likes per second (1 to 1000000000)")]
    NotANumber {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// The burst (twice the rate) does not fit `u32`.
    #[error("{name}={rate}: its burst (2 × rate) overflows; use at most 1000000000")]
    Overflow {
        /// The variable.
        name: &'static str,
        /// The rate given.
        rate: u32,
    },
    /// The guard refused the limit (0, or too fast for its clock).
    #[error("{name}: {source}")]
    Guard {
        /// The variable.
        name: &'static str,
        /// Why.
        source: GuardError,
    },
}

/// The default per-user and per-post rates of the likes API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LikesLimits {
    /// Likes per second per user.
    pub per_user: u32,
    /// Likes per second per post (per instance).
    pub per_post: u32,
}

impl LikesLimits {
    /// Reads both variables through `lookup` (the process environment in the Lambda).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, LimitsError> {
        let read = |name: &'static str, default: u32| match lookup(name) {
            None => Ok(default),
            Some(value) => value
                .trim()
                .parse::<u32>()
                .map_err(|_| LimitsError::NotANumber { name, value }),
        };
        Ok(Self {
            per_user: read(USER_LIKES_PER_SECOND, DEFAULT_USER_LIKES_PER_SECOND)?,
            per_post: read(POST_LIKES_PER_SECOND, DEFAULT_POST_LIKES_PER_SECOND)?,
        })
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, LimitsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The admission settings: both defaults, bursts of 2× the rate (checked).
    pub fn admission(&self) -> Result<AdmissionConfig, LimitsError> {
        let limit = |name: &'static str, rate: u32| {
            let burst = rate
                .checked_mul(2)
                .ok_or(LimitsError::Overflow { name, rate })?;
            Limit::per_second(rate, burst).map_err(|source| LimitsError::Guard { name, source })
        };
        Ok(AdmissionConfig::default()
            .tenant_limit(limit(USER_LIKES_PER_SECOND, self.per_user)?)
            .key_limit(limit(POST_LIKES_PER_SECOND, self.per_post)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn defaults_limit_both_users_and_posts() {
        let limits = LikesLimits::from_lookup(env(&[])).unwrap();
        let config = limits.admission().unwrap();
        assert_eq!(config.tenant.unwrap().burst(), 20);
        assert_eq!(config.key.unwrap().burst(), 4_000);
    }

    #[test]
    fn overflowing_zero_and_garbage_rates_are_config_errors_naming_the_variable() {
        let big = LikesLimits::from_lookup(env(&[(USER_LIKES_PER_SECOND, "2147483648")])).unwrap();
        let err = big.admission().unwrap_err();
        assert!(matches!(err, LimitsError::Overflow { name, .. } if name == USER_LIKES_PER_SECOND));
        let fast = LikesLimits::from_lookup(env(&[(POST_LIKES_PER_SECOND, "1000000000")])).unwrap();
        assert!(
            fast.admission().is_ok(),
            "one token per nanosecond is the guard's ceiling"
        );
        let zero = LikesLimits::from_lookup(env(&[(POST_LIKES_PER_SECOND, "0")])).unwrap();
        assert!(matches!(
            zero.admission(),
            Err(LimitsError::Guard { name, .. }) if name == POST_LIKES_PER_SECOND
        ));
        for bad in ["-1", "ten", "4294967296", ""] {
            let err = LikesLimits::from_lookup(env(&[(USER_LIKES_PER_SECOND, bad)])).unwrap_err();
            assert!(err.to_string().contains(USER_LIKES_PER_SECOND), "{err}");
        }
    }
}

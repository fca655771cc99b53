//! The admission gate in front of a handler: per-key and per-tenant token buckets
//! ([`heatsink_core::guard`]) whose per-id limits come from the hot-key directory.
//!
//! A request for `key` by `tenant` is admitted only if both buckets have a token; otherwise the
//! caller answers HTTP 429 with `Retry-After` ([`Decision::retry_after_secs`]). Defaults apply
//! to every key and tenant; a directory entry in `limit` mode for `key` (or for
//! `tenant#<tenant>`) overrides its rate and burst, so the controller, or an operator with
//! `heatsink hot set tenant#acme --mode limit --limit 50`, throttles one abuser without a deploy.
//! The directory is read through a [`CachedDirectory`] (one Scan per `max_age`).
//!
//! The gate fails open: if the directory cannot be read, requests are judged by the defaults and
//! the overrides already applied (the error is logged), because a directory outage must not
//! refuse every like. Memory is the guard's (bounded by its bucket caps) plus one entry per
//! override applied (bounded by the directory's size).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use heatsink_core::guard::{Admission, AdmissionConfig, Decision, GuardError, Limit, Scope};

use crate::hot::directory::CachedDirectory;

/// Requests refused with 429 by the admission gate (emit one per refusal).
pub const REJECTED: crate::metrics::MetricDef =
    crate::metrics::MetricDef::count("AdmissionRejected");

/// The directory key of a tenant's limit.
pub fn tenant_key(tenant: &str) -> String {
    format!("tenant#{tenant}")
}

/// Token buckets per key and tenant, with overrides from the hot-key directory.
#[derive(Debug)]
pub struct Gate {
    state: Mutex<State>,
    directory: Option<Arc<CachedDirectory>>,
    origin: Instant,
}

#[derive(Debug)]
struct State {
    admission: Admission,
    /// Overrides applied from the directory: (scope, id) → requests per second.
    applied: HashMap<(Scope, String), u32>,
}

impl Gate {
    /// A gate with `config`'s defaults; `directory` supplies per-id limits (None: defaults only).
    pub fn new(
        config: AdmissionConfig,
        directory: Option<Arc<CachedDirectory>>,
    ) -> Result<Self, GuardError> {
        Ok(Self {
            state: Mutex::new(State {
                admission: Admission::new(config)?,
                applied: HashMap::new(),
            }),
            directory,
            origin: Instant::now(),
        })
    }

    /// Decides one request for `key` by `tenant`, taking a token from both buckets if admitted.
    pub async fn check(&self, key: &str, tenant: &str) -> Result<Decision, GuardError> {
        let limits = match &self.directory {
            None => None,
            Some(dir) => match dir.snapshot().await {
                Ok(snap) => Some((snap.limit(key), snap.limit(&tenant_key(tenant)))),
                Err(e) => {
                    tracing::warn!(error = %e, "hot-key directory unreadable; admission on defaults");
                    None
                }
            },
        };
        let mut state = self.state.lock().map_err(|_| GuardError::InvalidConfig {
            field: "gate",
            reason: "a thread panicked while holding the admission state",
        })?;
        if let Some((key_limit, tenant_limit)) = limits {
            state.sync(Scope::Key, key, key_limit)?;
            state.sync(Scope::Tenant, tenant, tenant_limit)?;
        }
        let now = self.origin.elapsed();
        state.admission.check(key, tenant, now)
    }
}

impl State {
    /// Makes `id`'s override in `scope` match the directory's `limit` (requests per second,
    /// burst equal to one second's worth).
    fn sync(&mut self, scope: Scope, id: &str, limit: Option<u32>) -> Result<(), GuardError> {
        let current = self.applied.get(&(scope, id.to_owned())).copied();
        if current == limit {
            return Ok(());
        }
        match limit {
            Some(rate) => {
                self.admission
                    .set_override(scope, id, Limit::per_second(rate, rate)?)?;
                self.applied.insert((scope, id.to_owned()), rate);
            }
            None => {
                self.admission.clear_override(scope, id);
                self.applied.remove(&(scope, id.to_owned()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn defaults_admit_a_burst_then_refuse_with_retry_after() {
        let key = Limit::per_second(2, 2).unwrap();
        let gate = Gate::new(AdmissionConfig::default().key_limit(key), None).unwrap();
        assert!(gate.check("p9", "u1").await.unwrap().is_admitted());
        assert!(gate.check("p9", "u2").await.unwrap().is_admitted());
        let refused = gate.check("p9", "u3").await.unwrap();
        assert_eq!(refused.retry_after_secs(), Some(1));
        assert!(
            gate.check("p1", "u3").await.unwrap().is_admitted(),
            "other keys unaffected"
        );
    }

    #[test]
    fn overrides_follow_the_directory_and_are_cleared_with_it() {
        let config = AdmissionConfig::default();
        let mut state = State {
            admission: Admission::new(config).unwrap(),
            applied: HashMap::new(),
        };
        state.sync(Scope::Tenant, "acme", Some(1)).unwrap();
        let t = std::time::Duration::ZERO;
        assert!(
            state
                .admission
                .check("p1", "acme", t)
                .unwrap()
                .is_admitted()
        );
        assert!(
            !state
                .admission
                .check("p2", "acme", t)
                .unwrap()
                .is_admitted()
        );
        state.sync(Scope::Tenant, "acme", None).unwrap();
        assert!(state.applied.is_empty());
        assert!(
            state
                .admission
                .check("p3", "acme", t)
                .unwrap()
                .is_admitted()
        );
    }
}

//! "Is anyone mining?": whether an operator leads, read from its leader
//! Lease, so that a workflow nobody works on does not look merely queued.
//!
//! With no operator running (crashed, not installed, its RBAC broken) every
//! start would answer `running` and every poll "queued" forever: an agent
//! cannot tell slow from abandoned. The frontend reads the operator's leader
//! Lease (by name; the chart grants `get` on that one Lease) every few
//! seconds and says so in each unfinished workflow's answer. `/readyz` stays
//! about the frontend itself.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;

use crate::metrics::Metrics;

/// How often the Lease is read.
pub const READ_EVERY: Duration = Duration::from_secs(5);

/// What the frontend knows of the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Not configured, not read yet, or the Lease cannot be read: say nothing.
    Unknown,
    /// A holder renewed the Lease within its duration (and as much again for
    /// clock skew between its node and ours).
    Leading,
    /// No operator leads; `since` is when the last leader's term ran out
    /// (none when no operator ever held the Lease).
    Absent { since: Option<Timestamp> },
}

/// Whether `lease` (None: it does not exist) shows a leading operator at `now`.
pub fn presence_of(lease: Option<&Lease>, now: Timestamp) -> Presence {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else { return Presence::Absent { since: None } };
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()).map(|t| t.0);
    let Some(renewed) = renewed else { return Presence::Absent { since: None } };
    let term = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15).clamp(1, 3600)));
    let ends = renewed.checked_add(term).unwrap_or(Timestamp::MAX);
    let holder = spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty());
    let skew_allowance = ends.checked_add(term).unwrap_or(Timestamp::MAX);
    if holder && now <= skew_allowance {
        Presence::Leading
    } else {
        // A released Lease (no holder) ended when it was last renewed.
        Presence::Absent { since: Some(if holder { ends } else { renewed }) }
    }
}

/// The latest [`Presence`], shared by every request.
pub struct OperatorWatch {
    current: RwLock<Presence>,
}

impl OperatorWatch {
    /// One that never learns anything (no Lease configured).
    pub fn unknown() -> Arc<Self> {
        Arc::new(Self { current: RwLock::new(Presence::Unknown) })
    }

    pub fn presence(&self) -> Presence {
        *self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set(&self, presence: Presence) {
        *self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = presence;
    }

    /// Reads `lease` in `leases` every [`READ_EVERY`] for as long as the
    /// process runs; the gauge `mcp_frontend_operator_leading` follows it.
    pub fn spawn(leases: Api<Lease>, lease: String, metrics: Arc<Metrics>) -> Arc<Self> {
        let watch = Self::unknown();
        let shared = watch.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(READ_EVERY);
            loop {
                ticks.tick().await;
                metrics
                    .api_requests
                    .get_or_create(&crate::metrics::ReasonLabels { reason: "get_lease" })
                    .inc();
                let presence = match leases.get_opt(&lease).await {
                    Ok(found) => presence_of(found.as_ref(), Timestamp::now()),
                    Err(err) => {
                        tracing::warn!(%lease, error = %err, "cannot read the operator's leader Lease");
                        Presence::Unknown
                    }
                };
                if presence != shared.presence() {
                    tracing::info!(%lease, ?presence, "operator presence changed");
                }
                metrics.operator_leading.set(match presence {
                    Presence::Leading => 1,
                    Presence::Absent { .. } => 0,
                    Presence::Unknown => -1,
                });
                shared.set(presence);
            }
        });
        watch
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn lease(holder: Option<&str>, renewed: Option<i64>, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: renewed.map(|s| MicroTime(at(s))),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_renewed_lease_leads_and_an_expired_or_released_one_does_not() {
        let held = lease(Some("operator-0"), Some(1_000), 15);
        assert_eq!(presence_of(Some(&held), at(1_010)), Presence::Leading);
        // Within one more term for clock skew, still leading; after it, absent
        // since the term ran out.
        assert_eq!(presence_of(Some(&held), at(1_030)), Presence::Leading);
        assert_eq!(presence_of(Some(&held), at(1_031)), Presence::Absent { since: Some(at(1_015)) });
        let released = lease(None, Some(1_000), 15);
        assert_eq!(presence_of(Some(&released), at(1_001)), Presence::Absent { since: Some(at(1_000)) });
        let empty = lease(Some(""), Some(1_000), 15);
        assert!(matches!(presence_of(Some(&empty), at(1_001)), Presence::Absent { .. }));
    }

    #[test]
    fn no_lease_or_a_lease_never_renewed_means_no_operator_ever_led() {
        assert_eq!(presence_of(None, at(1_000)), Presence::Absent { since: None });
        let never = lease(Some("operator-0"), None, 15);
        assert_eq!(presence_of(Some(&never), at(1_000)), Presence::Absent { since: None });
    }

    #[test]
    fn absurd_durations_and_times_neither_panic_nor_lead_forever() {
        let huge = lease(Some("operator-0"), Some(1_000), i32::MAX);
        assert_eq!(
            presence_of(Some(&huge), at(1_000 + 2 * 3_600 + 1)),
            Presence::Absent { since: Some(at(4_600)) }
        );
        let late = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("x".into()),
                renew_time: Some(MicroTime(Timestamp::MAX)),
                lease_duration_seconds: Some(-5),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(presence_of(Some(&late), Timestamp::MAX), Presence::Leading);
    }
}

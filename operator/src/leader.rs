//! Leader election: of several replicas, the one holding a Lease reconciles.
//!
//! `kube-lease-manager` acquires and renews the Lease. On top of it, this
//! replica calls itself leader only while the Lease, as last seen through a
//! watch, names it and was renewed recently enough that it cannot have
//! expired yet by this replica's clock. A leader cut off from the API server
//! therefore stops before a standby may take over, not when a renewal call
//! finally fails. Writes a deposed leader had already started are refused by
//! the status write's resourceVersion precondition (see `controller`).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::Election;

/// Whether this replica may reconcile now.
#[derive(Clone)]
pub struct Leadership {
    elected: Option<Arc<Elected>>,
}

struct Elected {
    identity: String,
    lease: ObjectRef<Lease>,
    seen: Store<Lease>,
    lease_duration: Duration,
    /// How long before the Lease could expire this replica stops.
    safety: Duration,
}

impl Leadership {
    /// Without election this process is the only one: always the leader.
    pub fn alone() -> Self {
        Self { elected: None }
    }

    /// A replica that takes part in the election and holds no Lease (for tests).
    #[cfg(test)]
    pub fn standby() -> Self {
        let (seen, _) = kube::runtime::reflector::store();
        let elected = Elected {
            identity: "standby".into(),
            lease: ObjectRef::new("lease").within("ns"),
            seen,
            lease_duration: Duration::from_secs(15),
            safety: Duration::from_secs(2),
        };
        Self { elected: Some(Arc::new(elected)) }
    }

    /// Whether this replica takes part in an election (others may lead).
    pub fn is_elected(&self) -> bool {
        self.elected.is_some()
    }

    pub fn is_leading(&self) -> bool {
        let Some(elected) = &self.elected else { return true };
        let lease = elected.seen.get(&elected.lease);
        holds_lease(
            lease.as_ref().and_then(|l| l.spec.as_ref()),
            &elected.identity,
            elected.lease_duration,
            elected.safety,
            Timestamp::now(),
        )
    }
}

/// Whether `spec` names `identity` as holder and, renewed at its renewTime
/// for its duration (or `default_duration`), stays valid for more than
/// `safety` after `now`. Any missing field means no.
pub fn holds_lease(
    spec: Option<&LeaseSpec>,
    identity: &str,
    default_duration: Duration,
    safety: Duration,
    now: Timestamp,
) -> bool {
    let Some(spec) = spec else { return false };
    if spec.holder_identity.as_deref() != Some(identity) {
        return false;
    }
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else { return false };
    let duration = spec
        .lease_duration_seconds
        .map_or(default_duration, |seconds| Duration::from_secs(u64::try_from(seconds).unwrap_or(0)));
    let valid_for = SignedDuration::try_from(duration.saturating_sub(safety)).unwrap_or(SignedDuration::MAX);
    match renewed.checked_add(valid_for) {
        Ok(deadline) => now < deadline,
        Err(_) => false, // past the end of time: a forged or broken Lease is not ours
    }
}

/// The parameters the Lease is held with: renewed a third of its duration
/// before it ends; this replica stops half of that before it could end.
pub fn timings(lease_seconds: u64) -> (u64, Duration) {
    let grace = (lease_seconds / 3).max(1);
    (grace, Duration::from_millis(grace.saturating_mul(500)))
}

/// Runs the election. `on_change(true)` is called when this replica starts
/// leading, `on_change(false)` when it stops; the returned handle ends it.
pub async fn start(
    client: Client,
    election: &Election,
    fallback_namespace: Option<&str>,
    on_change: impl Fn(bool) + Send + 'static,
) -> Result<(Leadership, ElectionHandle), kube_lease_manager::LeaseManagerError> {
    let namespace = election.namespace.as_deref().or(fallback_namespace).unwrap_or("default").to_string();
    let identity = election.identity.clone().unwrap_or_else(random_identity);
    let (grace, safety) = timings(election.lease_seconds);
    let manager = LeaseManagerBuilder::new(client.clone(), &election.lease)
        .with_namespace(&namespace)
        .with_parameters(LeaseParams::new(&identity, election.lease_seconds, grace))
        .build()
        .await?;
    let (elected_rx, task) = manager.watch().await;
    let (seen, writer) = reflector::store::<Lease>();
    let leadership = Leadership {
        elected: Some(Arc::new(Elected {
            identity: identity.clone(),
            lease: ObjectRef::new(&election.lease).within(&namespace),
            seen,
            lease_duration: Duration::from_secs(election.lease_seconds),
            safety,
        })),
    };
    info!(lease = %election.lease, %namespace, %identity, seconds = election.lease_seconds, "joining leader election");
    let leases: Api<Lease> = Api::namespaced(client, &namespace);
    let lease_events =
        watcher(leases, watcher::Config::default().fields(&format!("metadata.name={}", election.lease)))
            .default_backoff()
            .reflect(writer);
    let observer = tokio::spawn(observe(leadership.clone(), elected_rx, lease_events, on_change));
    Ok((leadership, ElectionHandle { task, observer }))
}

/// Recomputes leadership on every Lease event, every election change and
/// every second (a lease ages without events), and reports transitions.
async fn observe(
    leadership: Leadership,
    mut elected: watch::Receiver<bool>,
    lease_events: impl futures::Stream<Item = Result<watcher::Event<Lease>, watcher::Error>> + Send,
    on_change: impl Fn(bool),
) {
    let mut lease_events = std::pin::pin!(lease_events);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut leading = false;
    loop {
        tokio::select! {
            changed = elected.changed() => if changed.is_err() { return },
            event = lease_events.next() => match event {
                Some(Err(err)) => warn!(error = %err, "watching the leader Lease"),
                Some(Ok(_)) => {}
                None => return,
            },
            _ = tick.tick() => {}
        }
        // The manager's own view first: a replica it calls standby never leads.
        let now = *elected.borrow() && leadership.is_leading();
        if now != leading {
            leading = now;
            info!(leading, "leadership changed");
            on_change(leading);
        }
    }
}

/// Ends the election, giving the Lease up so a standby need not wait for it to expire.
pub struct ElectionHandle {
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    observer: tokio::task::JoinHandle<()>,
}

impl ElectionHandle {
    pub async fn step_down(self) {
        // The observer holds the manager's channel: ending it makes the manager release.
        self.observer.abort();
        let _ = self.observer.await;
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => info!("released the leader Lease"),
            Ok(Ok(Err(err))) => warn!(error = %err, "releasing the leader Lease"),
            Ok(Err(_)) | Err(_) => warn!("the leader Lease was not released in time; it will expire"),
        }
    }
}

fn random_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}-{:x}", host.trim(), std::process::id(), Timestamp::now().as_nanosecond() & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use proptest::prelude::*;

    fn spec(holder: &str, renewed: Timestamp, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: seconds,
            ..Default::default()
        }
    }

    const FIFTEEN: Duration = Duration::from_secs(15);

    #[test]
    fn a_leader_stops_before_its_lease_could_expire() {
        let renewed = Timestamp::from_second(1_800_000_000).unwrap();
        let safety = Duration::from_secs(2);
        let at = |s: i64| renewed.checked_add(SignedDuration::from_secs(s)).unwrap();
        let lease = spec("me", renewed, Some(15));
        assert!(holds_lease(Some(&lease), "me", FIFTEEN, safety, at(0)));
        assert!(holds_lease(Some(&lease), "me", FIFTEEN, safety, at(12)));
        assert!(!holds_lease(Some(&lease), "me", FIFTEEN, safety, at(13)), "2 s before expiry it stops");
        assert!(!holds_lease(Some(&lease), "other", FIFTEEN, safety, at(0)));
        assert!(!holds_lease(None, "me", FIFTEEN, safety, at(0)));
        let never_renewed = LeaseSpec { renew_time: None, ..lease.clone() };
        assert!(!holds_lease(Some(&never_renewed), "me", FIFTEEN, safety, at(0)));
    }

    #[test]
    fn renewal_comes_before_the_leader_would_stop() {
        for seconds in [3, 6, 15, 60, 3600] {
            let (grace, safety) = timings(seconds);
            // Renewed `grace` before the end; stops `safety` before it; a standby waits for the end.
            assert!(
                Duration::from_secs(grace) > safety && !safety.is_zero(),
                "{seconds}: {grace} {safety:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_lease_is_judged_without_panicking(
            seconds in proptest::option::of(any::<i32>()),
            renewed in -377_705_116_800i64..=253_402_207_200i64,
            now in -377_705_116_800i64..=253_402_207_200i64,
        ) {
            let renewed = Timestamp::from_second(renewed).unwrap();
            let now = Timestamp::from_second(now).unwrap();
            let lease = spec("me", renewed, seconds);
            let held = holds_lease(Some(&lease), "me", FIFTEEN, Duration::from_secs(1), now);
            let lasts = seconds.map_or(15, |s| i64::from(s.max(0)));
            if now.as_second() >= renewed.as_second().saturating_add(lasts) {
                prop_assert!(!held, "an expired lease is never held");
            }
        }
    }
}

//! Why a Job's Pods cannot start, for every kind of work, and what that
//! means for the work (pure: no client, time passed in).
//!
//! The words come from whoever reports them on a real cluster: the API
//! server's refusal of the Pod (admission, Pod Security, a webhook, a
//! quota: the operator asks it first-hand with a dry-run create, see the
//! operator's `pod_start`), the scheduler's `PodScheduled=False` condition,
//! and the node's container waiting reasons. Each becomes a [`Blocked`]; a
//! [`verdict`] then says whether the work fails at once (the cause cannot
//! clear by itself), waits within a bound (it may), or waits for capacity
//! (the queue's business, never a failure).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// Longest text of the cluster's words kept in a status message.
pub const MAX_DETAIL_BYTES: usize = 400;
/// A Job that has made no Pod for this long is asked about (a dry-run
/// create of its Pod): the Job controller makes Pods within milliseconds
/// when nothing refuses them.
pub const NO_POD_GRACE: Duration = Duration::from_secs(3);
/// How often work whose Pods wait for a cause that may clear looks again
/// (within the bound), so its message follows what the cluster says.
pub const WAITING_RECHECK: Duration = Duration::from_secs(5);
/// The operator's default bound for a cause that may clear (`--pod-start-timeout-seconds`).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(600);
/// How long work's Pods wait for room on the nodes before its status and
/// an Event say so. On a busy cluster most Pods wait a few seconds for a
/// node between others' Pods; each said wait cost a status write when it
/// began, one when it ended and an Event — more than half the operator's
/// calls when 200 workflows shared 8 node slots (docs/BENCHMARKS.md, #72).
/// Fair share at the node reads the wait from the operator's own Pod watch
/// at once, whatever the status says.
pub const NODE_WAIT_SAID_AFTER: Duration = Duration::from_secs(30);

/// Why a Pod cannot start. The `reason` of each is what callers, `kubectl`
/// and metrics see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// Admission refused the Pod (Pod Security, a validating webhook, a
    /// LimitRange, an invalid Pod): never clears for the same template.
    Refused,
    /// The image reference is not a valid one.
    InvalidImage,
    /// A Secret, ConfigMap or key the Pod needs is missing.
    MissingConfig,
    /// A ResourceQuota is used up: clears when other Pods end.
    Quota,
    /// The image cannot be pulled (missing, private without credentials,
    /// registry down).
    ImagePull,
    /// The container runtime cannot create the container.
    CreateContainer,
    /// A container crashes and restarts in place.
    CrashLoop,
    /// No node matches the Pod (selector, affinity, taints, volumes).
    Unschedulable,
    /// Nodes match but none has room now: the work waits its turn for
    /// capacity, without a bound.
    NoCapacity,
}

impl Cause {
    /// Every cause, for metrics and docs.
    pub const ALL: [Cause; 9] = [
        Cause::Refused,
        Cause::InvalidImage,
        Cause::MissingConfig,
        Cause::Quota,
        Cause::ImagePull,
        Cause::CreateContainer,
        Cause::CrashLoop,
        Cause::Unschedulable,
        Cause::NoCapacity,
    ];

    /// Whether the cause cannot clear without someone changing the tool,
    /// the image or the namespace: the work fails at once.
    pub fn permanent(self) -> bool {
        matches!(self, Cause::Refused | Cause::InvalidImage | Cause::MissingConfig)
    }

    /// Whether the work waits for it without a bound.
    pub fn unbounded(self) -> bool {
        self == Cause::NoCapacity
    }

    /// A short name: the metric label, and the word in messages.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Refused => "refused",
            Cause::InvalidImage => "invalid-image",
            Cause::MissingConfig => "missing-config",
            Cause::Quota => "quota",
            Cause::ImagePull => "image-pull",
            Cause::CreateContainer => "create-container",
            Cause::CrashLoop => "crash-loop",
            Cause::Unschedulable => "unschedulable",
            Cause::NoCapacity => "no-capacity",
        }
    }

    /// What the work waits for, or why it cannot run, in a caller's words
    /// (the start of [`Blocked::message`]).
    pub fn said(self) -> &'static str {
        match self {
            Cause::Refused => "the cluster refuses its Pod",
            Cause::InvalidImage => "its image name is not valid",
            Cause::MissingConfig => "its Pod needs a Secret, ConfigMap or key that does not exist",
            Cause::Quota => "waiting for room in the namespace's ResourceQuota",
            Cause::ImagePull => "waiting for its image to be pulled",
            Cause::CreateContainer => "waiting for its container to be created",
            Cause::CrashLoop => "its container keeps crashing",
            Cause::Unschedulable => "waiting for a node that can take its Pod",
            Cause::NoCapacity => "waiting for room on the cluster's nodes",
        }
    }
}

/// One reading: a Pod of the work cannot start, why, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub cause: Cause,
    /// The cluster's own words (clipped), with what reported them.
    pub detail: String,
    /// Since when the Pod (or the Job, when no Pod could be made) waits.
    pub since: Timestamp,
}

impl Blocked {
    pub fn new(cause: Cause, detail: &str, since: Timestamp) -> Self {
        let detail = crate::pow::clip(detail.trim(), MAX_DETAIL_BYTES).to_string();
        Blocked { cause, detail, since }
    }

    /// The message a caller reads.
    pub fn message(&self) -> String {
        format!("{}: {}", self.cause.said(), self.detail)
    }
}

/// What the work does about a [`Blocked`] reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep the slot and wait; say `message`, look again after `look_again`.
    Wait { message: String, look_again: Duration },
    /// End the work as failed with `reason` (its status and Event reason).
    Fail { reason: &'static str, message: String },
}

/// Status and Event reasons of work whose Pods cannot start.
pub mod reasons {
    /// The cause cannot clear by itself (refused, invalid image, missing config).
    pub const CANNOT_START: &str = "CannotStart";
    /// A cause that may clear did not within the bound.
    pub const START_TIMED_OUT: &str = "StartTimedOut";
    /// The work's Pods wait for a cause that may clear (an Event, once).
    pub const WAITING_TO_START: &str = "WaitingToStart";
}

/// The verdict on `blocked` at `now`, with `bound` for causes that may clear.
pub fn verdict(blocked: &Blocked, bound: Duration, now: Timestamp) -> Verdict {
    if blocked.cause.permanent() {
        return Verdict::Fail { reason: reasons::CANNOT_START, message: blocked.message() };
    }
    // A clock behind the Pod's creation has waited nothing yet.
    let waited = now.duration_since(blocked.since);
    let waited = if waited.is_negative() { Duration::ZERO } else { waited.unsigned_abs() };
    let message = blocked.message();
    if blocked.cause.unbounded() {
        return Verdict::Wait { message, look_again: WAITING_RECHECK };
    }
    match bound.checked_sub(waited).filter(|left| !left.is_zero()) {
        Some(left) => Verdict::Wait {
            message: format!("{message} (fails after {} s of waiting)", bound.as_secs()),
            look_again: left.min(WAITING_RECHECK),
        },
        None => Verdict::Fail {
            reason: reasons::START_TIMED_OUT,
            message: format!("{message} (waited {} s, the bound is {} s)", waited.as_secs(), bound.as_secs()),
        },
    }
}

/// Whether a node wait that began at `since` is long enough at `now` for
/// the work's status to say so ([`NODE_WAIT_SAID_AFTER`]).
pub fn node_wait_said(since: Timestamp, now: Timestamp) -> bool {
    unsaid_for(since, now).is_none()
}

/// How much longer `blocked` stays out of the work's status: `Some` only
/// for a wait for room on the nodes younger than [`NODE_WAIT_SAID_AFTER`];
/// every other cause is said at once.
pub fn quiet_for(blocked: &Blocked, now: Timestamp) -> Option<Duration> {
    (blocked.cause == Cause::NoCapacity).then(|| unsaid_for(blocked.since, now)).flatten()
}

fn unsaid_for(since: Timestamp, now: Timestamp) -> Option<Duration> {
    let waited = now.duration_since(since);
    let waited = if waited.is_negative() { Duration::ZERO } else { waited.unsigned_abs() };
    NODE_WAIT_SAID_AFTER.checked_sub(waited).filter(|left| !left.is_zero())
}

/// What the first blocked reading of many says: a permanent cause first,
/// else the one waiting longest.
pub fn first(readings: impl IntoIterator<Item = Blocked>) -> Option<Blocked> {
    readings.into_iter().min_by_key(|b| (!b.cause.permanent(), b.since))
}

/// Why the API server refused a Pod, from the message of its refusal
/// (HTTP 403 or 422 to a create); `None` when the refusal is about the
/// asker (RBAC), not the Pod.
pub fn of_refusal(message: &str, since: Timestamp) -> Option<Blocked> {
    // RBAC: the operator itself may not create Pods here; nothing about the work.
    if message.contains("cannot create resource") {
        return None;
    }
    // A quota used up, or not yet counted by its controller: both clear.
    let quota = message.contains("exceeded quota") || message.contains("status unknown for quota");
    let cause = if quota { Cause::Quota } else { Cause::Refused };
    Some(Blocked::new(cause, &format!("the API server refused the Pod: {message}"), since))
}

/// Why `pod` (one its Job made, not finished) cannot start, from its status
/// as the scheduler and the node report it; `None` while it starts or runs.
pub fn of_pod(pod: &Pod) -> Option<Blocked> {
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0)?;
    let statuses =
        status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    let waiting = statuses.filter_map(|s| Some((s.name.as_str(), s.state.as_ref()?.waiting.as_ref()?)));
    for (container, waiting) in waiting {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let cause = match reason {
            "InvalidImageName" => Cause::InvalidImage,
            "CreateContainerConfigError" => Cause::MissingConfig,
            "ErrImagePull" | "ImagePullBackOff" | "ErrImageNeverPull" | "RegistryUnavailable" => {
                Cause::ImagePull
            }
            "CreateContainerError" | "RunContainerError" => Cause::CreateContainer,
            "CrashLoopBackOff" => Cause::CrashLoop,
            _ => continue,
        };
        let message = waiting.message.as_deref().unwrap_or_default();
        let detail = format!("container {container}: {reason}: {message}");
        return Some(Blocked::new(cause, detail.trim_end_matches([' ', ':']), created));
    }
    let unscheduled = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
    })?;
    let message = unscheduled.message.as_deref().unwrap_or_default();
    // The scheduler's words: "0/3 nodes are available: 3 Insufficient cpu."
    // names full nodes; anything else (selector, affinity, taints, volume
    // binding) a node that matches none.
    let full = message.contains("Insufficient ") || message.contains("Too many pods");
    let cause = if full { Cause::NoCapacity } else { Cause::Unschedulable };
    Some(Blocked::new(cause, &format!("the scheduler: {message}"), created))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": "2023-11-14T22:13:20Z"},
            "status": status,
        }))
        .unwrap()
    }

    fn waiting(reason: &str, message: &str) -> Pod {
        pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "tool", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": reason, "message": message}}}]}))
    }

    #[test]
    fn each_node_reason_is_its_cause_with_the_nodes_words() {
        for (reason, cause) in [
            ("InvalidImageName", Cause::InvalidImage),
            ("CreateContainerConfigError", Cause::MissingConfig),
            ("ErrImagePull", Cause::ImagePull),
            ("ImagePullBackOff", Cause::ImagePull),
            ("CreateContainerError", Cause::CreateContainer),
            ("CrashLoopBackOff", Cause::CrashLoop),
        ] {
            let blocked = of_pod(&waiting(reason, "what the node said")).expect(reason);
            assert_eq!(blocked.cause, cause, "{reason}");
            assert_eq!(blocked.detail, format!("container tool: {reason}: what the node said"));
            assert_eq!(blocked.since, at(0));
        }
        assert_eq!(of_pod(&waiting("ContainerCreating", "")), None, "starting is not blocked");
        assert_eq!(of_pod(&waiting("PodInitializing", "")), None);
    }

    #[test]
    fn a_finished_or_running_pod_is_never_blocked() {
        let mut failed = waiting("ImagePullBackOff", "x");
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        assert_eq!(of_pod(&failed), None);
        let running = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "tool", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
             "state": {"running": {}}}]}));
        assert_eq!(of_pod(&running), None);
    }

    #[test]
    fn the_scheduler_tells_full_nodes_from_nodes_that_never_match() {
        let unschedulable = |message: &str| {
            pod(json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}))
        };
        let full = of_pod(&unschedulable("0/3 nodes are available: 3 Insufficient cpu.")).unwrap();
        assert_eq!(full.cause, Cause::NoCapacity);
        let too_many = of_pod(&unschedulable("0/1 nodes are available: 1 Too many pods.")).unwrap();
        assert_eq!(too_many.cause, Cause::NoCapacity);
        let never =
            unschedulable("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.");
        let never = of_pod(&never).unwrap();
        assert_eq!(never.cause, Cause::Unschedulable);
        assert!(never.detail.contains("didn't match Pod's node affinity/selector"), "{}", never.detail);
    }

    #[test]
    fn a_quota_may_clear_and_admission_does_not_and_rbac_is_not_the_pods_fault() {
        let quota =
            "pods \"x\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0";
        assert_eq!(of_refusal(quota, at(0)).unwrap().cause, Cause::Quota);
        let webhook = "admission webhook \"deny.example.com\" denied the request: no";
        assert_eq!(of_refusal(webhook, at(0)).unwrap().cause, Cause::Refused);
        let pss = "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\": seccompProfile";
        assert_eq!(of_refusal(pss, at(0)).unwrap().cause, Cause::Refused);
        let rbac = "pods is forbidden: User \"system:serviceaccount:a:b\" cannot create resource \"pods\"";
        assert_eq!(of_refusal(rbac, at(0)), None);
    }

    #[test]
    fn permanent_causes_fail_at_once_and_others_after_the_bound() {
        let bound = Duration::from_secs(60);
        let refused = Blocked::new(Cause::Refused, "no", at(0));
        let failed = verdict(&refused, bound, at(0));
        assert!(
            matches!(&failed, Verdict::Fail { reason: reasons::CANNOT_START, message } if message.contains("no"))
        );
        let pull = Blocked::new(Cause::ImagePull, "ImagePullBackOff", at(0));
        match verdict(&pull, bound, at(10)) {
            Verdict::Wait { message, look_again } => {
                assert!(message.contains("ImagePullBackOff") && message.contains("60 s"), "{message}");
                assert_eq!(look_again, WAITING_RECHECK);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(verdict(&pull, bound, at(58)), Verdict::Wait { look_again, .. } if look_again == Duration::from_secs(2))
        );
        assert!(matches!(
            verdict(&pull, bound, at(60)),
            Verdict::Fail { reason: reasons::START_TIMED_OUT, .. }
        ));
        let full = Blocked::new(Cause::NoCapacity, "Insufficient cpu", at(0));
        assert!(matches!(verdict(&full, bound, at(100_000)), Verdict::Wait { .. }), "capacity is waited for");
    }

    #[test]
    fn a_wait_for_room_on_the_nodes_is_said_only_once_it_lasted() {
        let said_after = NODE_WAIT_SAID_AFTER.as_secs() as i64;
        let full = Blocked::new(Cause::NoCapacity, "Too many pods", at(0));
        assert_eq!(quiet_for(&full, at(0)), Some(NODE_WAIT_SAID_AFTER));
        assert_eq!(quiet_for(&full, at(said_after - 1)), Some(Duration::from_secs(1)));
        assert_eq!(quiet_for(&full, at(said_after)), None);
        assert_eq!(quiet_for(&full, at(-5)), Some(NODE_WAIT_SAID_AFTER), "a clock behind waited nothing");
        assert!(!node_wait_said(at(0), at(said_after - 1)) && node_wait_said(at(0), at(said_after)));
        for cause in Cause::ALL.into_iter().filter(|c| *c != Cause::NoCapacity) {
            assert_eq!(quiet_for(&Blocked::new(cause, "x", at(0)), at(0)), None, "{cause:?} is said at once");
        }
    }

    #[test]
    fn the_first_reading_is_a_permanent_one_else_the_oldest() {
        let pull = Blocked::new(Cause::ImagePull, "a", at(0));
        let later = Blocked::new(Cause::Quota, "b", at(5));
        let config = Blocked::new(Cause::MissingConfig, "c", at(9));
        assert_eq!(first([later.clone(), pull.clone()]), Some(pull.clone()));
        assert_eq!(first([pull, later, config.clone()]), Some(config));
        assert_eq!(first([]), None);
    }

    #[test]
    fn the_clusters_words_are_clipped() {
        let long = "x".repeat(10_000);
        assert_eq!(Blocked::new(Cause::Refused, &long, at(0)).detail.len(), MAX_DETAIL_BYTES);
    }
}

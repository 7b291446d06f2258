//! Who holds every caller's runs, watched: the workflow namespace's reach
//! (`mining_api::reach`) audited at start and every `--audit-interval-seconds`,
//! as a metric always, and as a warning Event on the namespace and a log
//! line whenever the set of holders changes — so "trust the namespace"
//! is a list an administrator is told about, not a sentence.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use mining_api::reach::{Report, audit};

use crate::metrics::Metrics;

/// The Event's reason, for `kubectl get events --field-selector reason=…`.
pub const REASON: &str = "NamespaceReachChanged";

/// Longest Event note the API server keeps (events.k8s.io/v1: 1 KiB).
const MAX_NOTE_BYTES: usize = 1024;

/// One line per holder and binding, as the log and the Event say them; the
/// rights are `kubectl mining audit`'s to list (an Event keeps 1 KiB) (pure).
pub fn holders(report: &Report) -> BTreeSet<String> {
    report
        .findings
        .iter()
        .map(|f| format!("{} through {} ({})", f.subject.text(), f.binding, f.role))
        .collect()
}

/// How many distinct subjects hold the reach (pure).
pub fn subjects(report: &Report) -> usize {
    report.findings.iter().map(|f| &f.subject).collect::<BTreeSet<_>>().len()
}

/// What to say when the holders went from `before` to `after`: nothing when
/// unchanged, or on the first audit when nobody holds it (pure).
pub fn change_note(
    namespace: &str,
    before: Option<&BTreeSet<String>>,
    after: &BTreeSet<String>,
) -> Option<String> {
    if before == Some(after) || (before.is_none() && after.is_empty()) {
        return None;
    }
    let mut note = if after.is_empty() {
        format!(
            "nobody besides cluster admins, Kubernetes and this product holds the runs of namespace {namespace} now"
        )
    } else {
        let list: Vec<&str> = after.iter().map(String::as_str).collect();
        format!(
            "{} binding(s) give every caller's runs in namespace {namespace} (create Pods, exec, Secrets or run \
             status) to: {}; see `kubectl mining audit -n {namespace}`",
            after.len(),
            list.join("; ")
        )
    };
    if note.len() > MAX_NOTE_BYTES {
        let mut cut = MAX_NOTE_BYTES - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    Some(note)
}

/// Audits `namespace` now and every `interval`, for ever.
pub async fn watch(
    client: Client,
    namespace: String,
    product_namespace: String,
    interval: Duration,
    metrics: std::sync::Arc<Metrics>,
) {
    let mut before: Option<BTreeSet<String>> = None;
    loop {
        match audit(&client, &namespace, &product_namespace).await {
            Ok(report) => {
                metrics.namespace_reach_subjects.set(i64::try_from(subjects(&report)).unwrap_or(i64::MAX));
                let after = holders(&report);
                if let Some(note) = change_note(&namespace, before.as_ref(), &after) {
                    tracing::warn!(namespace = %namespace, holders = ?after, complete = report.complete,
                        "the subjects holding every caller's runs changed");
                    publish(&client, &namespace, !after.is_empty(), note).await;
                }
                before = Some(after);
            }
            Err(err) => {
                metrics.namespace_reach_audit_errors.inc();
                tracing::warn!(namespace = %namespace, error = %err,
                    "cannot audit who holds the namespace's runs (does the frontend have the chart's -audit ClusterRole?)");
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// A warning (or, once cleared, a normal) Event regarding the namespace.
async fn publish(client: &Client, namespace: &str, warning: bool, note: String) {
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{namespace}.reach.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some("Audit".into()),
        reason: Some(REASON.into()),
        note: Some(note),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        reporting_controller: Some("mining-operator.dev/mcp-frontend".into()),
        reporting_instance: Some(std::env::var("HOSTNAME").unwrap_or_else(|_| "mcp-frontend".into())),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
            name: Some(namespace.into()),
            // The API server wants it equal to the Event's own.
            namespace: Some(namespace.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Err(err) =
        Api::<Event>::namespaced(client.clone(), namespace).create(&PostParams::default(), &event).await
    {
        tracing::warn!(namespace = %namespace, error = %err, "could not record the reach Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mining_api::reach::{Finding, Holder};

    fn report(who: &[&str]) -> Report {
        let findings = who
            .iter()
            .map(|name| Finding {
                subject: Holder { kind: "User".into(), name: (*name).into(), namespace: None },
                binding: format!("RoleBinding w/{name}"),
                role: "ClusterRole edit".into(),
                rights: vec!["create pods".into()],
            })
            .collect();
        Report { namespace: "w".into(), findings, complete: true }
    }

    #[test]
    fn a_change_is_told_once_and_a_quiet_start_is_not() {
        let nobody = holders(&report(&[]));
        assert_eq!(change_note("w", None, &nobody), None, "a default install says nothing");
        let mallory = holders(&report(&["mallory"]));
        let note = change_note("w", Some(&nobody), &mallory).expect("told");
        assert!(note.contains("User mallory through RoleBinding w/mallory (ClusterRole edit)"), "{note}");
        assert_eq!(change_note("w", Some(&mallory), &mallory), None, "unchanged: not told again");
        assert!(change_note("w", Some(&mallory), &nobody).unwrap().contains("nobody besides"));
        assert!(change_note("w", None, &mallory).is_some(), "holders at start are told");
        assert_eq!(subjects(&report(&["a", "b"])), 2);
    }

    #[test]
    fn a_long_list_is_cut_to_what_an_event_keeps() {
        let many: Vec<String> = (0..200).map(|i| format!("user-{i}")).collect();
        let names: Vec<&str> = many.iter().map(String::as_str).collect();
        let note = change_note("w", None, &holders(&report(&names))).unwrap();
        assert!(note.len() <= MAX_NOTE_BYTES && note.ends_with("..."), "{}", note.len());
    }
}

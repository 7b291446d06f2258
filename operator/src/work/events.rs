//! Events about work of any kind: what a reconcile did, said where
//! `kubectl describe` shows it.

use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use tracing::warn;

use super::MANAGER;
use crate::naming::workflow_label;

/// An Event a reconcile planned: `reason` is one of `mining_api::reasons`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// Events about work of any kind go out off the reconcile's path: they
/// describe what was done, and waiting for them would delay its next step.
///
/// Written directly rather than through kube's `Recorder`, which merges
/// Events by reason into one series (keeping only the first note, so
/// "BlockMined (x6)" told of block 1 only) and names them after the whole
/// workflow name (too long past ~236 characters, so those got no Events).
pub fn publish_events<K: Resource<DynamicType = ()>>(
    client: &Client,
    instance: &str,
    regarding: &K,
    name: &str,
    events: Vec<PlannedEvent>,
) {
    if events.is_empty() {
        return;
    }
    let api: Api<EventV1> =
        Api::namespaced(client.clone(), regarding.meta().namespace.as_deref().unwrap_or_default());
    let reference = regarding.object_ref(&());
    let name = name.to_string();
    let instance = instance.to_string();
    tokio::spawn(async move {
        for (sequence, event) in events.into_iter().enumerate() {
            let body = build_event(&reference, &instance, event, Timestamp::now(), sequence);
            if let Err(err) = api.create(&PostParams::default(), &body).await {
                warn!(name = %name, error = %err, "could not record an Event");
            }
        }
    });
}

/// One events.k8s.io Event about `regarding`, named to fit any workflow name.
pub fn build_event(
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    instance: &str,
    event: PlannedEvent,
    now: Timestamp,
    sequence: usize,
) -> EventV1 {
    let stem = workflow_label(regarding.name.as_deref().unwrap_or("workflow"));
    EventV1 {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{stem}.{:x}{sequence:02x}", now.as_nanosecond())),
            namespace: regarding.namespace.clone(),
            ..Default::default()
        },
        action: Some("Reconcile".into()),
        reason: Some(event.reason.into()),
        note: Some(event.note),
        type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
        event_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now)),
        regarding: Some(regarding.clone()),
        reporting_controller: Some(MANAGER.into()),
        reporting_instance: Some(instance.to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_named_within_limits_whatever_the_workflow_name() {
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            name: Some("w".repeat(253)),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        let planned = PlannedEvent { warning: true, reason: "BlockMined", note: "block 2/3".into() };
        let event =
            build_event(&regarding, "operator-0", planned, Timestamp::from_second(1_800_000_000).unwrap(), 1);
        let name = event.metadata.name.unwrap();
        assert!(name.len() <= 253 && name.starts_with("www"), "{name}");
        assert_eq!(event.regarding.unwrap().name, regarding.name);
        assert_eq!((event.type_.as_deref(), event.note.as_deref()), (Some("Warning"), Some("block 2/3")));
    }
}

//! One status write for every kind, with one refusal policy, and what a
//! change of lifecycle means to the queue — said here once, so no kind
//! wakes or reorders the queue itself.

use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use mining_api::{Lifecycle, Work, reasons};
use serde_json::json;
use tracing::{info, warn};

use super::{MANAGER, PlannedEvent, Shell, WorkKind, publish_events};
use crate::queue::WorkQueue;
use crate::{Error, Result};

/// Most characters of the API server's refusal kept in a status.
const MAX_REFUSAL: usize = 512;

/// What writing a status came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    Written,
    /// Someone wrote since the work was read (a user's change, a newer
    /// leader): plan again from the cache.
    Conflict,
    /// The API server will never store the planned status (400, 413,
    /// 422: too large, say): the work ended with the reason instead.
    Refused,
}

/// Whether the API server refused a write for good: retrying the same body
/// can only be refused again.
pub fn refused_for_good(error: &kube::Error) -> Option<&str> {
    match error {
        kube::Error::Api(refusal) if matches!(refusal.code, 400 | 413 | 422) => Some(&refusal.message),
        _ => None,
    }
}

impl<K: WorkKind> Shell<K> {
    /// Writes `status` on the version `work` was read at, remembers it and
    /// tells the queue what changed; a status refused for good ends the
    /// work with [`WorkKind::refused_status`] and a `StatusRejected` Event.
    pub async fn record_status(&self, work: &K, status: &K::Status) -> Result<Recorded> {
        let name = work.name_any();
        let api: Api<K> =
            Api::namespaced(self.client.clone(), work.meta().namespace.as_deref().unwrap_or_default());
        let version = work.meta().resource_version.as_deref();
        let failed = |source| Error::WriteStatus { noun: K::NOUN, name: name.clone(), source };
        match write_status(&api, &name, status, version).await {
            Ok(written) => {
                self.remember(work, status, written);
                Ok(Recorded::Written)
            }
            Err(kube::Error::Api(conflict)) if conflict.code == 409 => {
                info!(kind = K::NOUN, name = %name, "changed since it was read; planning again");
                self.memory.forget(work);
                Ok(Recorded::Conflict)
            }
            Err(err) => {
                let Some(why) = refused_for_good(&err) else { return Err(failed(err)) };
                let why = mining_api::pow::clip(why, MAX_REFUSAL).to_string();
                warn!(kind = K::NOUN, name = %name, error = %why, "the API server refused a status; ending the work");
                let (ended, note) = work.refused_status(&why, k8s_openapi::jiff::Timestamp::now());
                match write_status(&api, &name, &ended, version).await {
                    Ok(written) => self.remember(work, &ended, written),
                    Err(kube::Error::Api(conflict)) if conflict.code == 409 => {
                        self.memory.forget(work);
                        return Ok(Recorded::Conflict);
                    }
                    Err(err) => return Err(failed(err)),
                }
                let event = PlannedEvent { warning: true, reason: reasons::STATUS_REJECTED, note };
                publish_events(&self.client, &self.instance, work, &name, vec![event]);
                Ok(Recorded::Refused)
            }
        }
    }

    /// The queue counts what was written (its cache may lag), and a change
    /// of lifecycle may change whose turn it is.
    fn remember(&self, work: &K, status: &K::Status, version: Option<String>) {
        let after = self.memory.remember(work, status, version);
        if after != Lifecycle::Active {
            // Holding no slot, it waits for no node (and the queue hears of
            // the freed slot just below).
            self.memory.observe_node_wait(work.meta().uid.as_deref().unwrap_or_default(), None);
        }
        lifecycle_changed(&self.queue, work.lifecycle(), after);
    }
}

/// What a change of lifecycle written means to the queue: admitted work left
/// it (everyone behind moved up); work that held a slot, or a place, and
/// no longer does frees one for whoever is next, of any kind.
pub fn lifecycle_changed(queue: &WorkQueue, before: Lifecycle, after: Lifecycle) {
    match queue_change(before, after) {
        QueueChange::None => {}
        QueueChange::Reordered => queue.memory.queue_changed(),
        QueueChange::Freed => queue.wake_next(),
    }
}

/// What a change of lifecycle does to the queue (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueChange {
    None,
    /// It left the queue for a slot: the order behind it changed.
    Reordered,
    /// It gave up a slot or a place: whoever is next may take it.
    Freed,
}

pub fn queue_change(before: Lifecycle, after: Lifecycle) -> QueueChange {
    if before == after || before.is_finished() {
        return QueueChange::None;
    }
    match (before, after) {
        (Lifecycle::Waiting, Lifecycle::Active) => QueueChange::Reordered,
        (Lifecycle::Active, _) => QueueChange::Freed,
        (_, after) if after.is_finished() => QueueChange::Freed,
        _ => QueueChange::None,
    }
}

/// Server-side applies `status` to work of any kind under this operator's
/// field manager, only if the object is still at `resource_version` (409
/// otherwise: a user's change, or a newer leader's write, is never
/// overwritten by a plan made before it); returns the version it produced.
pub async fn write_status<K: Work>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
    resource_version: Option<&str>,
) -> kube::Result<Option<String>> {
    let mut body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(version) = resource_version {
        body["metadata"] = json!({ "resourceVersion": version });
    }
    let written = api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(body)).await?;
    Ok(written.meta().resource_version.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Lifecycle::*;

    #[test]
    fn the_queue_hears_of_every_change_that_moves_it() {
        assert_eq!(queue_change(Waiting, Active), QueueChange::Reordered);
        for after in [Waiting, AwaitingInput, Succeeded, Failed, Cancelled] {
            assert_eq!(queue_change(Active, after), QueueChange::Freed, "{after:?}");
        }
        for after in [Succeeded, Failed, Cancelled] {
            assert_eq!(queue_change(Waiting, after), QueueChange::Freed, "a place freed: {after:?}");
            assert_eq!(queue_change(AwaitingInput, after), QueueChange::Freed);
        }
        for (before, after) in
            [(Waiting, Waiting), (Active, Active), (Succeeded, Failed), (Cancelled, Waiting)]
        {
            assert_eq!(queue_change(before, after), QueueChange::None, "{before:?} → {after:?}");
        }
        assert_eq!(queue_change(Waiting, AwaitingInput), QueueChange::None);
    }
}

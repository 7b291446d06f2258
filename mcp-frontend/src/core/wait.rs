//! How a wait ends, written once for every face: woken by the one watch,
//! it returns when the workflow has finished, vanished or become unreadable,
//! when the deadline passes, or when the one waiting has gone. Progress is
//! reported through the face's [`WaitListener`] as blocks get mined.

use k8s_openapi::jiff::Timestamp;
use mining_api::MiningWorkflow;
use tokio::time::Instant;

use super::{Core, View};
use crate::cache::Cached;
use crate::contract::{OutcomeStatus, Progress, outcome};
use crate::ids::Caller;

/// The face's side of a wait: where progress goes, and how to tell that
/// the client has gone.
pub trait WaitListener: Send {
    /// Reports that `progress` blocks are mined; `false` when the client is gone.
    fn progress(&mut self, progress: Progress, message: &str) -> impl Future<Output = bool> + Send;

    /// Resolves once the client has gone (never, if it cannot tell).
    fn gone(&self) -> impl Future<Output = ()> + Send;
}

impl Core {
    /// Waits until `deadline` for `latest` (a workflow the caller may see) to
    /// finish. The answer is what the caller may see at the end: the workflow
    /// as last seen, `Missing` once deleted, `Unreadable` once unreadable.
    pub async fn wait(
        &self,
        caller: &Caller,
        mut latest: Box<MiningWorkflow>,
        deadline: Instant,
        listener: &mut impl WaitListener,
    ) -> View {
        let name = latest.metadata.name.clone().unwrap_or_default();
        let mut subscription = self.cache.subscribe(&name);
        let mut reported: Option<u32> = None;
        let mut seen_in_cache = false;
        loop {
            match self.cache.get(&name) {
                Cached::Found(workflow) => {
                    seen_in_cache = true;
                    latest = workflow;
                }
                Cached::Unreadable { problem, .. } => return View::Unreadable(problem),
                // Deleted while we waited (e.g. its retention ran out).
                Cached::Missing if seen_in_cache => return View::Missing,
                // Created a moment ago and not delivered by the watch yet.
                Cached::Missing => {}
            }
            if !self.owns(&latest, caller) {
                return View::Missing;
            }
            let answer = outcome(&latest, Timestamp::now());
            if let Some(progress) = answer.progress
                && reported.is_none_or(|done| progress.blocks_done > done)
            {
                reported = Some(progress.blocks_done);
                if !listener.progress(progress, &answer.status_message).await {
                    return View::Found(latest);
                }
            }
            if answer.status != OutcomeStatus::Running || Instant::now() >= deadline {
                return View::Found(latest);
            }
            tokio::select! {
                () = subscription.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = listener.gone() => return View::Found(latest),
            }
        }
    }
}

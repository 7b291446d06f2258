//! How a wait ends, written once for every face: woken by the one watch,
//! it returns when the workflow has finished, vanished or become unreadable,
//! when the deadline passes, or when the one waiting has gone. Progress is
//! reported through the face's [`WaitListener`] as blocks get mined.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;
use mining_api::MiningWorkflow;
use tokio::time::Instant;

use super::{Core, View};
use crate::cache::Cached;
use crate::contract::{Details as _, OutcomeStatus, Progress, outcome};
use crate::ids::Caller;
use crate::metrics::ReasonLabels;

/// The face's side of a wait: where progress goes, and how to tell that
/// the client has gone.
pub trait WaitListener: Send {
    /// Reports that `progress` blocks are mined; `false` when the client is gone.
    fn progress(&mut self, progress: Progress, message: &str) -> impl Future<Output = bool> + Send;

    /// Resolves once the client has gone (never, if it cannot tell).
    fn gone(&self) -> impl Future<Output = ()> + Send;
}

/// A wait nobody watches: no progress to send, and no client to lose (a
/// cancel's confirmation, a task's snapshot).
pub struct Unattended;

impl WaitListener for Unattended {
    async fn progress(&mut self, _progress: Progress, _message: &str) -> bool {
        true
    }

    async fn gone(&self) {
        std::future::pending::<()>().await;
    }
}

/// Which cap a wait ran into (the metric's label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitCap {
    PerCaller,
    Total,
}

/// The concurrent waits of one replica, bounded per caller and in total: a
/// caller holding many waits open cannot take the memory or the slots that
/// another caller's wait needs. A wait over a cap is not refused: it answers
/// at once, as `wait_seconds: 0` would.
pub struct WaitSlots {
    per_caller: usize,
    total: usize,
    /// Slots held in total, and per caller label.
    held: Mutex<(usize, HashMap<String, usize>)>,
}

/// One wait's slot; dropping it frees the slot.
pub struct WaitSlot<'a> {
    slots: &'a WaitSlots,
    caller_label: String,
}

impl WaitCap {
    pub fn metric_label(self) -> &'static str {
        match self {
            Self::PerCaller => "per_caller",
            Self::Total => "total",
        }
    }
}

impl WaitSlots {
    pub fn new(per_caller: usize, total: usize) -> Self {
        Self { per_caller, total, held: Mutex::new((0, HashMap::new())) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, HashMap<String, usize>)> {
        // Counters only: a panic elsewhere cannot leave them inconsistent.
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for `caller_label`, or the cap that is full.
    pub fn take(&self, caller_label: &str) -> Result<WaitSlot<'_>, WaitCap> {
        let mut held = self.lock();
        let (total, per_caller) = &mut *held;
        let mine = per_caller.get(caller_label).copied().unwrap_or(0);
        if mine >= self.per_caller {
            return Err(WaitCap::PerCaller);
        }
        if *total >= self.total {
            return Err(WaitCap::Total);
        }
        *total += 1;
        per_caller.insert(caller_label.to_string(), mine + 1);
        Ok(WaitSlot { slots: self, caller_label: caller_label.to_string() })
    }

    /// The caps: (per caller, in total).
    pub fn caps(&self) -> (usize, usize) {
        (self.per_caller, self.total)
    }

    /// Slots held now, in total.
    pub fn held(&self) -> usize {
        self.lock().0
    }
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        let (total, per_caller) = &mut *held;
        *total = total.saturating_sub(1);
        if let Some(mine) = per_caller.get_mut(&self.caller_label) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                per_caller.remove(&self.caller_label);
            }
        }
    }
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
        // Over a cap the wait ends at once, with the workflow as it is now.
        let _slot = match self.waits.take(&caller.digest) {
            Ok(slot) => Some(slot),
            Err(cap) if Instant::now() < deadline => {
                self.metrics
                    .waits_shortened
                    .get_or_create(&ReasonLabels { reason: cap.metric_label() })
                    .inc();
                tracing::debug!(workflow = %name, ?cap, "wait answered at once: too many waits");
                return self.view_now(&name, caller, latest);
            }
            Err(_) => None,
        };
        let cache = self.cache_holding(&name);
        let mut subscription = cache.subscribe(&name);
        let mut reported: Option<u32> = None;
        let mut seen_in_cache = false;
        loop {
            match cache.get(&name) {
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
            if !self.owns(&*latest, caller) {
                return View::Missing;
            }
            let answer = outcome(&latest, Timestamp::now()).with_operator(self.operator_presence());
            if let Some(progress) = answer.details.progress()
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

    /// The workflow as the caller may see it now, without waiting.
    fn view_now(&self, name: &str, caller: &Caller, latest: Box<MiningWorkflow>) -> View {
        let latest = match self.cache_holding(name).get(name) {
            Cached::Found(workflow) => workflow,
            Cached::Unreadable { problem, .. } => return View::Unreadable(problem),
            Cached::Missing => latest,
        };
        if self.owns(&*latest, caller) { View::Found(latest) } else { View::Missing }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_over_its_cap_gets_no_slot_and_others_still_do() {
        let slots = WaitSlots::new(2, 3);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        assert_eq!(slots.take("a").err(), Some(WaitCap::PerCaller));
        let _b1 = slots.take("b").unwrap();
        assert_eq!(slots.take("c").err(), Some(WaitCap::Total));
        assert_eq!(slots.held(), 3);
        drop(a1);
        assert_eq!(slots.held(), 2);
        let _c1 = slots.take("c").unwrap();
        assert_eq!(slots.take("a").err(), Some(WaitCap::Total));
    }

    #[test]
    fn freed_slots_leave_nothing_behind() {
        let slots = WaitSlots::new(1, 10);
        for _ in 0..100 {
            let slot = slots.take("a").unwrap();
            drop(slot);
        }
        assert_eq!(slots.held(), 0);
        assert!(slots.lock().1.is_empty(), "no per-caller entry outlives its slots");
    }
}

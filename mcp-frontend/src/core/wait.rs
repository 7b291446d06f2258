//! How a wait ends, written once for every kind and face: woken by the one
//! watch of its kind, it returns when the work has finished, vanished or
//! become unreadable, when the deadline passes, or when the one waiting has
//! gone. Progress is reported through the face's [`WaitListener`] as it changes.

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::{Core, Refreshed, Served, View};
use crate::contract::{Details as _, OutcomeStatus, Progress};
use crate::ids::Caller;
use crate::metrics::ReasonLabels;

/// The face's side of a wait: where progress goes, and how to tell that
/// the client has gone.
pub trait WaitListener: Send {
    /// Reports `progress` parts done of `total` (a value that only grows);
    /// `false` when the client is gone.
    fn progress(&mut self, progress: f64, total: u32, message: &str) -> impl Future<Output = bool> + Send;

    /// Resolves once the client has gone (never, if it cannot tell).
    fn gone(&self) -> impl Future<Output = ()> + Send;

    /// The work asks its caller `requests` (key → request): whether the
    /// wait goes on while they are answered (a listener that put them to
    /// its client). By default the wait ends, and its answer says what is asked.
    fn asks(
        &mut self,
        _requests: &serde_json::Map<String, serde_json::Value>,
    ) -> impl Future<Output = bool> + Send {
        std::future::ready(false)
    }
}

/// A cancel's confirmation: `inner` hears progress, and work that asks is
/// waited on, not answered (the cancel, already recorded, ends it in moments;
/// the watch's copy may not show the cancel yet).
pub struct UntilCancelled<'a, L>(pub &'a mut L);

impl<L: WaitListener> WaitListener for UntilCancelled<'_, L> {
    fn progress(&mut self, progress: f64, total: u32, message: &str) -> impl Future<Output = bool> + Send {
        self.0.progress(progress, total, message)
    }

    fn gone(&self) -> impl Future<Output = ()> + Send {
        self.0.gone()
    }

    async fn asks(&mut self, _requests: &serde_json::Map<String, serde_json::Value>) -> bool {
        true
    }
}

/// A wait nobody watches: no progress to send, and no client to lose (a
/// cancel's confirmation, a task's snapshot).
pub struct Unattended;

impl WaitListener for Unattended {
    async fn progress(&mut self, _progress: f64, _total: u32, _message: &str) -> bool {
        true
    }

    async fn gone(&self) {
        std::future::pending::<()>().await;
    }
}

/// The progress a wait has told, so that each report says something new
/// and its value only grows (the protocol's rule).
#[derive(Debug, Default)]
pub struct Reported {
    last: Option<(u32, String)>,
    /// Reports made since the parts done last grew.
    steps: u32,
}

impl Reported {
    /// The value to report for `progress` and `message`, or `None` when
    /// nothing changed (pure). A new message at the same parts done (a
    /// tool's status line, a queue position) moves the value a little
    /// within the part: done + k/(k+1), always below the next part.
    pub fn next(&mut self, progress: Progress, message: &str) -> Option<f64> {
        let done = progress.blocks_done;
        let value = match &self.last {
            Some((last, told)) if done == *last && message == told => return None,
            Some((last, _)) if done < *last => return None,
            Some((last, _)) if done == *last => {
                self.steps += 1;
                f64::from(done) + f64::from(self.steps) / f64::from(self.steps + 1)
            }
            _ => {
                self.steps = 0;
                f64::from(done)
            }
        };
        self.last = Some((done, message.to_string()));
        Some(value)
    }
}

impl Core {
    /// Waits until `deadline` for `latest` (work the caller may see, of any
    /// kind) to finish. The answer is what the caller may see at the end:
    /// the work as last seen, `Missing` once deleted, `Unreadable` once
    /// unreadable. Progress goes to `listener` as it changes.
    pub async fn wait<K: Served>(
        &self,
        caller: &Caller,
        mut latest: Box<K>,
        deadline: Instant,
        listener: &mut impl WaitListener,
    ) -> View<K> {
        let name = latest.meta().name.clone().unwrap_or_default();
        // Over a cap the wait ends at once, with the work as it is now.
        let _slot = match self.waits.take(&caller.digest) {
            Ok(slot) => Some(slot),
            Err(cap) if Instant::now() < deadline => {
                self.metrics
                    .waits_shortened
                    .get_or_create(&ReasonLabels { reason: cap.metric_label() })
                    .inc();
                tracing::debug!(kind = K::NOUN, name = %name, ?cap, "wait answered at once: too many waits");
                return self.cached::<K>(caller, &name).unwrap_or_else(|| self.owned(caller, latest));
            }
            Err(_) => None,
        };
        let mut subscription = self.homes::<K>().holding(&name).cache.subscribe(&name);
        let mut reported = Reported::default();
        let mut seen_in_cache = false;
        loop {
            match self.refresh(caller, &mut latest, &mut seen_in_cache) {
                Refreshed::Current => {}
                Refreshed::Unreadable(problem) => return View::Unreadable(problem),
                Refreshed::Gone => return View::Missing,
            }
            let answer = latest.outcome(Timestamp::now()).with_operator(self.operator_presence());
            if let Some(progress) = answer.details.progress()
                && let Some(value) = reported.next(progress, &answer.status_message)
                && !listener.progress(value, progress.blocks_total, &answer.status_message).await
            {
                return View::Found(latest);
            }
            let goes_on = match (answer.status, answer.details.input_requests()) {
                (OutcomeStatus::Running, _) => true,
                (OutcomeStatus::InputRequired, Some(requests)) => listener.asks(requests).await,
                _ => false,
            };
            if !goes_on || Instant::now() >= deadline {
                return View::Found(latest);
            }
            tokio::select! {
                () = subscription.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = listener.gone() => return View::Found(latest),
            }
        }
    }

    /// `work` if it is the caller's.
    fn owned<K: Served>(&self, caller: &Caller, work: Box<K>) -> View<K> {
        if self.owns(&*work, caller) { View::Found(work) } else { View::Missing }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_told_when_it_changes_and_its_value_only_grows() {
        let mut reported = Reported::default();
        let at = |done| Progress { blocks_done: done, blocks_total: 4 };
        assert_eq!(reported.next(at(0), "queued"), Some(0.0));
        assert_eq!(reported.next(at(0), "queued"), None, "nothing new");
        assert_eq!(reported.next(at(0), "running: step 1"), Some(0.5));
        assert_eq!(reported.next(at(0), "running: step 2"), Some(2.0 / 3.0));
        assert_eq!(reported.next(at(2), "2 done"), Some(2.0));
        assert_eq!(reported.next(at(1), "an older status"), None, "never backwards");
        assert_eq!(reported.next(at(2), "2 done, next"), Some(2.5));
        assert_eq!(reported.next(at(4), "all done"), Some(4.0));
    }
}

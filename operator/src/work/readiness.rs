//! When the operator's caches hold a complete picture of the cluster.
//!
//! Both `/readyz` and every reconcile of every kind depend on it. A
//! reconcile that ran on a Job cache still being filled would take a
//! block's existing Job for a missing one; an admission that ran on a kind's
//! cache still being filled would count that kind's running work as none
//! and pass `--max-concurrent-work`. So every watch the shell starts is
//! registered here, and nothing reconciles until each has listed. The
//! signal is the watches' own "initial list done" event, seen as it passes,
//! rather than `Store::wait_until_ready`: that wakes only the last of
//! several waiters, and the controllers are already among them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::watcher;
use tracing::info;

/// Which registered watches have delivered their first complete list.
pub struct Readiness {
    /// What is awaited: (name, done, whether reconciles wait for it too).
    watches: Mutex<Vec<(String, Arc<AtomicBool>, bool)>>,
    /// True once every watch has listed: what reconciles wait for.
    listed: AtomicBool,
    /// What `/readyz` reads: every watch listed and everything else awaited done.
    ready: Arc<AtomicBool>,
}

/// One registered watch: told each of its events.
#[derive(Clone)]
pub struct Listed {
    listed: Arc<AtomicBool>,
    readiness: Arc<Readiness>,
}

impl Readiness {
    pub fn new(ready: Arc<AtomicBool>) -> Arc<Self> {
        Arc::new(Self { watches: Mutex::default(), listed: AtomicBool::new(false), ready })
    }

    /// Registers a watch (`name`: what it lists, for the log) whose first
    /// list the operator waits for; until it has listed, nothing is ready.
    pub fn register(self: &Arc<Self>, name: impl Into<String>) -> Listed {
        self.awaits(name.into(), true)
    }

    /// Registers something else `/readyz` waits for (not reconciles): a
    /// standby's first copy of the leader's files (`crate::outputs::mirror`).
    pub fn register_for_readyz(self: &Arc<Self>, name: impl Into<String>) -> Listed {
        self.awaits(name.into(), false)
    }

    fn awaits(self: &Arc<Self>, name: String, reconciles_wait: bool) -> Listed {
        let listed = Arc::new(AtomicBool::new(false));
        let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        watches.push((name, listed.clone(), reconciles_wait));
        if reconciles_wait {
            self.listed.store(false, Ordering::Release);
        }
        self.ready.store(false, Ordering::Release);
        Listed { listed, readiness: self.clone() }
    }

    /// Whether every registered watch has listed everything.
    pub fn all_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The watches still listing, for a log line.
    pub fn listing(&self) -> Vec<String> {
        let watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        watches
            .iter()
            .filter(|(_, listed, _)| !listed.load(Ordering::Acquire))
            .map(|(n, ..)| n.clone())
            .collect()
    }

    fn check(&self) {
        // Under the lock, so a registration cannot slip between the count and the flag.
        let watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        let done = |(_, listed, _): &&(String, Arc<AtomicBool>, bool)| listed.load(Ordering::Acquire);
        let any = watches.iter().any(|(.., reconciles_wait)| *reconciles_wait);
        let listed = any && watches.iter().filter(|(.., reconciles_wait)| *reconciles_wait).all(|w| done(&w));
        if listed && !self.listed.swap(true, Ordering::AcqRel) {
            info!(watches = watches.len(), "caches synced");
        }
        if listed && watches.iter().all(|w| done(&w)) && !self.ready.swap(true, Ordering::AcqRel) {
            info!(awaited = watches.len(), "ready");
        }
    }
}

impl Listed {
    /// Notes an event of the watch: its `InitDone` means its store is
    /// complete (later relists keep serving the old contents until they finish).
    pub fn saw<K>(&self, event: &watcher::Event<K>) {
        if matches!(event, watcher::Event::InitDone) && !self.listed.swap(true, Ordering::AcqRel) {
            self.readiness.check();
        }
    }

    /// Marks something awaited that is not a watch as done (a standby's
    /// first copy of the leader's files, `crate::outputs::mirror`).
    pub fn done(&self) {
        if !self.listed.swap(true, Ordering::AcqRel) {
            self.readiness.check();
        }
    }

    /// Whether this watch has listed everything.
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use mining_api::{MiningWorkflow, ToolRun};

    /// The drift #62 found: the tool runs' watch was not among those
    /// readiness waited for, so an admission right after a start could
    /// count running tool runs as none. Every registered watch counts.
    #[test]
    fn ready_only_once_every_registered_watch_has_listed() {
        let ready = Arc::new(AtomicBool::new(false));
        let readiness = Readiness::new(ready.clone());
        let workflows = readiness.register("workflows");
        let jobs = readiness.register("jobs");
        let runs = readiness.register("tool runs");
        jobs.saw::<Job>(&watcher::Event::Init);
        jobs.saw(&watcher::Event::InitApply(Job::default()));
        assert!(!jobs.is_listed() && !ready.load(Ordering::Acquire));
        jobs.saw::<Job>(&watcher::Event::InitDone);
        workflows.saw::<MiningWorkflow>(&watcher::Event::InitDone);
        assert!(jobs.is_listed());
        assert!(!readiness.all_listed(), "the tool runs are not listed yet");
        assert_eq!(readiness.listing(), ["tool runs"]);
        runs.saw::<ToolRun>(&watcher::Event::InitDone);
        assert!(readiness.all_listed() && ready.load(Ordering::Acquire));
    }

    #[test]
    fn a_watch_registered_late_is_waited_for_too() {
        let readiness = Readiness::new(Arc::default());
        readiness.register("workflows").saw::<MiningWorkflow>(&watcher::Event::InitDone);
        assert!(readiness.all_listed());
        let runs = readiness.register("tool runs");
        assert!(!readiness.all_listed(), "a new watch has not listed yet");
        runs.saw::<ToolRun>(&watcher::Event::InitDone);
        assert!(readiness.all_listed());
    }

    /// A standby's first copy holds `/readyz`, never the reconciles.
    #[test]
    fn what_only_readyz_waits_for_holds_no_reconcile() {
        let ready = Arc::new(AtomicBool::new(false));
        let readiness = Readiness::new(ready.clone());
        let copy = readiness.register_for_readyz("a copy");
        readiness.register("tool runs").saw::<ToolRun>(&watcher::Event::InitDone);
        assert!(readiness.all_listed(), "reconciles go on");
        assert!(!ready.load(Ordering::Acquire), "not ready before the copy");
        assert_eq!(readiness.listing(), ["a copy"]);
        copy.done();
        assert!(ready.load(Ordering::Acquire));
    }

    #[test]
    fn nothing_registered_is_not_ready() {
        let readiness = Readiness::new(Arc::default());
        assert!(!readiness.all_listed());
    }
}

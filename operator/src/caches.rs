//! When the operator's caches hold a complete picture of the cluster.
//!
//! Both `/readyz` and every reconcile depend on it. A reconcile that ran on
//! a Job cache still being filled would take a block's existing Job for a
//! missing one, so it waits. The signal is the watches' own "initial list
//! done" event, seen as it passes, rather than `Store::wait_until_ready`:
//! that wakes only the last of several waiters, and the controller is
//! already one of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::runtime::watcher;
use tracing::info;

/// Which watches have delivered their first complete list.
pub struct CacheSync {
    workflows: AtomicBool,
    jobs: AtomicBool,
    /// What `/readyz` reads: true once both are listed.
    ready: Arc<AtomicBool>,
}

/// One of the watches whose first list the operator waits for.
#[derive(Clone, Copy, Debug)]
pub enum Watched {
    Workflows,
    Jobs,
}

impl CacheSync {
    pub fn new(ready: Arc<AtomicBool>) -> Self {
        Self { workflows: AtomicBool::new(false), jobs: AtomicBool::new(false), ready }
    }

    /// Notes an event of a watch: its `InitDone` means its store is complete
    /// (later relists keep serving the old contents until they finish).
    pub fn saw<K>(&self, watched: Watched, event: &watcher::Event<K>) {
        if !matches!(event, watcher::Event::InitDone) {
            return;
        }
        let flag = match watched {
            Watched::Workflows => &self.workflows,
            Watched::Jobs => &self.jobs,
        };
        flag.store(true, Ordering::Release);
        if self.workflows.load(Ordering::Acquire)
            && self.jobs.load(Ordering::Acquire)
            && !self.ready.swap(true, Ordering::AcqRel)
        {
            info!("caches synced; ready");
        }
    }

    /// Whether the Job cache has been listed in full. The controller holds
    /// reconciles until its own workflow cache is, so only Jobs are asked.
    pub fn jobs_listed(&self) -> bool {
        self.jobs.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;

    #[test]
    fn ready_only_once_both_watches_have_listed() {
        let ready = Arc::new(AtomicBool::new(false));
        let sync = CacheSync::new(ready.clone());
        sync.saw::<Job>(Watched::Jobs, &watcher::Event::Init);
        sync.saw(Watched::Jobs, &watcher::Event::InitApply(Job::default()));
        assert!(!sync.jobs_listed() && !ready.load(Ordering::Acquire));
        sync.saw::<Job>(Watched::Jobs, &watcher::Event::InitDone);
        assert!(sync.jobs_listed());
        assert!(!ready.load(Ordering::Acquire), "the workflows are not listed yet");
        sync.saw::<Job>(Watched::Workflows, &watcher::Event::InitDone);
        assert!(ready.load(Ordering::Acquire));
    }
}

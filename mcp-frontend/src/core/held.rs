//! A caller's work of every registered kind, as its quota ledger sees it.

use kube::api::ListParams;
use mining_api::labels;

use super::Core;
use super::kinds::{KindId, Registered};
use crate::cache::Entry;
use crate::ids::Caller;
use crate::quota::{CallError, Held, HeldWork, timed};
use crate::with_kind;

/// The work `caller` holds, of whichever kind.
pub(crate) struct CallersWork<'a> {
    pub core: &'a Core,
    pub caller: &'a Caller,
}

impl CallersWork<'_> {
    /// What `name` of kind `K` is, from its caches.
    fn cached_of<K: Registered>(&self, name: &str) -> Held {
        let cached = self.core.homes::<K>().holding(name).cache.get(name);
        held(cached, |work| self.core.owns(work, self.caller))
    }

    async fn fetched_of<K: Registered>(&self, name: &str) -> Result<Option<Held>, CallError> {
        for home in self.core.homes::<K>().all() {
            if let Some(work) = timed(home.api.get_opt(name)).await? {
                let unfinished = self.core.owns(&work, self.caller) && work.holds_place();
                return Ok(Some(if unfinished { Held::Unfinished } else { Held::Released }));
            }
        }
        Ok(None)
    }

    async fn unfinished_of<K: Registered>(&self, selector: &str) -> Result<Vec<String>, CallError> {
        let mut names = Vec::new();
        for home in self.core.homes::<K>().all() {
            let list = timed(home.api.list(&ListParams::default().labels(selector))).await?;
            names.extend(
                (list.items.iter())
                    .filter(|work| self.core.owns(*work, self.caller) && work.holds_place())
                    .filter_map(|work| work.meta().name.clone()),
            );
        }
        Ok(names)
    }
}

/// What a cached object means for the ledger holding its name (pure): only
/// the caller's own unfinished work holds a place. An object under that
/// name without the caller's proof (the caller's deleted, and a copy with
/// its label and a finalizer planted: Terminating for ever) is not theirs;
/// nor is one that cannot be read, since whose it is cannot be checked.
fn held<K: mining_api::Work>(cached: Entry<K>, owned: impl Fn(&K) -> bool) -> Held {
    match cached {
        Entry::Found(work) if owned(&work) && work.holds_place() => Held::Unfinished,
        Entry::Found(_) | Entry::Unreadable { .. } => Held::Released,
        Entry::Missing => Held::NotSeen,
    }
}

impl HeldWork for CallersWork<'_> {
    fn cached(&self, name: &str) -> Held {
        let mut kinds = KindId::ALL.into_iter();
        kinds
            .find_map(|kind| {
                Some(with_kind!(kind, K => self.cached_of::<K>(name))).filter(|held| *held != Held::NotSeen)
            })
            .unwrap_or(Held::NotSeen)
    }

    async fn fetched(&self, name: &str) -> Result<Held, CallError> {
        for kind in KindId::ALL {
            if let Some(held) = with_kind!(kind, K => self.fetched_of::<K>(name).await?) {
                return Ok(held);
            }
        }
        Ok(Held::Released)
    }

    async fn unfinished(&self) -> Result<Vec<String>, CallError> {
        let caller_labels = self.core.keys.caller_labels(&self.caller.digest);
        let selector = format!("{} in ({})", labels::CALLER, caller_labels.join(","));
        let mut names = Vec::new();
        for kind in KindId::ALL {
            names.extend(with_kind!(kind, K => self.unfinished_of::<K>(&selector).await?));
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mining_api::MiningWorkflow;

    #[test]
    fn only_the_callers_own_unfinished_workflow_holds_its_place() {
        let mining = MiningWorkflow::new("w", mining_api::MiningWorkflowSpec::new(8));
        let mut finished = mining.clone();
        finished.status = Some(mining_api::testing::status(mining_api::WorkflowPhase::Succeeded));
        let theirs = |_: &MiningWorkflow| true;
        let planted = |_: &MiningWorkflow| false;
        assert_eq!(held(Entry::Found(Box::new(mining.clone())), theirs), Held::Unfinished);
        assert_eq!(held(Entry::Found(Box::new(finished)), theirs), Held::Released);
        assert_eq!(held(Entry::Found(Box::new(mining)), planted), Held::Released);
        let unreadable = Entry::Unreadable { caller_label: Some("abc".into()), problem: "x".into() };
        assert_eq!(held(unreadable, theirs), Held::Released);
        assert_eq!(held(Entry::<MiningWorkflow>::Missing, theirs), Held::NotSeen);
    }
}

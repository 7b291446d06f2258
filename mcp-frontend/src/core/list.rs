//! A caller's work, newest first, from the caches alone.

use mining_api::MiningWorkflow;

use super::{Any, Core, KindId, Served};
use crate::cache::Entry;
use crate::ids::Caller;
use crate::with_kind;

/// One piece of the caller's work with its sort key.
pub struct Listed<K = MiningWorkflow> {
    /// Creation time in seconds since the epoch (0 when unknown).
    pub created: i64,
    pub name: String,
    pub work: Box<K>,
}

impl<K> Listed<K> {
    /// Newest first, then by name: a total order, so a page boundary
    /// (a cursor) never moves when new work arrives.
    fn sort_key(&self) -> (std::cmp::Reverse<i64>, &str) {
        (std::cmp::Reverse(self.created), &self.name)
    }

    /// Whether this row sorts after the row with key `(created, name)`.
    pub fn comes_after(&self, created: i64, name: &str) -> bool {
        self.sort_key() > (std::cmp::Reverse(created), name)
    }

    fn into_any(self) -> Listed<Any>
    where
        Box<K>: Into<Any>,
    {
        Listed { created: self.created, name: self.name, work: Box::new(self.work.into()) }
    }
}

fn sorted<K>(mut rows: Vec<Listed<K>>) -> Vec<Listed<K>> {
    rows.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    rows
}

impl Core {
    /// Every readable piece of work of kind `K` that `caller` started
    /// through this frontend, newest first (objects others labelled as the
    /// caller's are not).
    pub fn list<K: Served>(&self, caller: &Caller) -> Vec<Listed<K>> {
        let labels = self.keys.caller_labels(&caller.digest);
        let rows = self
            .homes::<K>()
            .all()
            .flat_map(|home| labels.iter().flat_map(move |label| home.cache.list_for(label)))
            .filter_map(|cached| match cached {
                Entry::Found(work) if self.owns(&*work, caller) => Some(Listed {
                    created: work.meta().creation_timestamp.as_ref().map_or(0, |t| t.0.as_second()),
                    name: work.meta().name.clone().unwrap_or_default(),
                    work,
                }),
                _ => None,
            })
            .collect();
        sorted(rows)
    }

    /// The caller's work of every kind, in one order.
    pub fn list_any(&self, caller: &Caller) -> Vec<Listed<Any>> {
        let every = KindId::ALL.into_iter().flat_map(|kind| {
            with_kind!(kind, K => self.list::<K>(caller).into_iter().map(Listed::into_any).collect::<Vec<_>>())
        });
        sorted(every.collect())
    }
}

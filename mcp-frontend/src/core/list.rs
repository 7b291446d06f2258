//! A caller's workflows, newest first, from the cache alone.

use mining_api::MiningWorkflow;

use super::Core;
use crate::cache::Cached;
use crate::ids::Caller;

/// One of the caller's workflows with its sort key.
pub struct Listed {
    /// Creation time in seconds since the epoch (0 when unknown).
    pub created: i64,
    pub name: String,
    pub workflow: Box<MiningWorkflow>,
}

impl Listed {
    /// Newest first, then by name: a total order, so a page boundary
    /// (a cursor) never moves when new workflows arrive.
    fn sort_key(&self) -> (std::cmp::Reverse<i64>, &str) {
        (std::cmp::Reverse(self.created), &self.name)
    }

    /// Whether this row sorts after the row with key `(created, name)`.
    pub fn comes_after(&self, created: i64, name: &str) -> bool {
        self.sort_key() > (std::cmp::Reverse(created), name)
    }
}

impl Core {
    /// Every readable workflow `caller` started through this frontend,
    /// newest first (objects others labelled as the caller's are not).
    pub fn list(&self, caller: &Caller) -> Vec<Listed> {
        let caches = std::iter::once(&self.cache).chain(self.previous.as_ref().map(|p| &p.cache));
        let labels = self.keys.caller_labels(&caller.digest);
        let mut rows: Vec<Listed> = caches
            .flat_map(|cache| labels.iter().flat_map(|label| cache.list_for(label)))
            .filter_map(|cached| match cached {
                Cached::Found(workflow) if self.owns(&*workflow, caller) => Some(Listed {
                    created: workflow.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second()),
                    name: workflow.metadata.name.clone().unwrap_or_default(),
                    workflow,
                }),
                _ => None,
            })
            .collect();
        rows.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        rows
    }
}

//! Exact concurrency limits and a fair queue (pure).
//!
//! Admissions are serialized by the controller (one lock), and each one
//! counts the workflows mining by their *freshest* phase — what this operator
//! last wrote, else the cache — so neither parallel reconciles nor a cache
//! that lags the operator's own writes can admit more than the limit.
//! Waiting workflows are admitted oldest first.

use std::collections::HashMap;
use std::sync::Arc;

use mining_api::{MiningWorkflow, WorkflowPhase};

/// A workflow with the phase this operator believes it has.
pub struct Seen {
    pub workflow: Arc<MiningWorkflow>,
    pub phase: WorkflowPhase,
}

/// The freshest phase of every workflow: a status this operator wrote wins
/// over the cache's (which may not have caught up with it yet).
pub fn freshest_phases(
    cached: Vec<Arc<MiningWorkflow>>,
    written: &HashMap<String, WorkflowPhase>,
) -> Vec<Seen> {
    cached
        .into_iter()
        .map(|workflow| {
            let cached_phase = workflow.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
            let phase = workflow
                .metadata
                .uid
                .as_ref()
                .and_then(|uid| written.get(uid))
                .copied()
                .unwrap_or(cached_phase);
            Seen { workflow, phase }
        })
        .collect()
}

/// Whether a workflow waits for a slot (and so holds a place in the queue).
fn waiting(seen: &Seen) -> bool {
    seen.phase == WorkflowPhase::Pending
        && !seen.workflow.spec.cancel
        && seen.workflow.metadata.deletion_timestamp.is_none()
}

/// Queue order: creation time, then namespace and name.
fn queue_key(workflow: &MiningWorkflow) -> (Option<k8s_openapi::jiff::Timestamp>, &str, &str) {
    (
        workflow.metadata.creation_timestamp.as_ref().map(|t| t.0),
        workflow.metadata.namespace.as_deref().unwrap_or_default(),
        workflow.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// For `me`: how many other workflows are mining, and how many waiting ones
/// are ahead of it in the queue.
pub fn standing(all: &[Seen], me: &MiningWorkflow) -> (usize, usize) {
    let uid = me.metadata.uid.as_deref();
    let others = all.iter().filter(|s| s.workflow.metadata.uid.as_deref() != uid);
    let (mut mining, mut ahead) = (0, 0);
    for seen in others {
        if seen.phase == WorkflowPhase::Mining {
            mining += 1;
        } else if waiting(seen) && queue_key(&seen.workflow) < queue_key(me) {
            ahead += 1;
        }
    }
    (mining, ahead)
}

/// The waiting workflows that should take the slots free now, oldest first.
pub fn next_in_queue(all: &[Seen], limit: usize) -> Vec<Arc<MiningWorkflow>> {
    let mining = all.iter().filter(|s| s.phase == WorkflowPhase::Mining).count();
    let mut queue: Vec<&Seen> = all.iter().filter(|s| waiting(s)).collect();
    queue.sort_by(|a, b| queue_key(&a.workflow).cmp(&queue_key(&b.workflow)));
    queue.into_iter().take(limit.saturating_sub(mining)).map(|s| s.workflow.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{at, workflow};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn seen(name: &str, created: i64, phase: WorkflowPhase) -> Seen {
        let mut wf = workflow(name, 8, 1);
        wf.metadata.creation_timestamp = Some(Time(at(created)));
        Seen { workflow: Arc::new(wf), phase }
    }

    #[test]
    fn standing_counts_mining_others_and_older_waiting_ones() {
        let all = [
            seen("a", 0, WorkflowPhase::Mining),
            seen("b", 1, WorkflowPhase::Pending),
            seen("c", 2, WorkflowPhase::Pending),
            seen("d", 3, WorkflowPhase::Succeeded),
        ];
        assert_eq!(standing(&all, &all[2].workflow), (1, 1));
        assert_eq!(standing(&all, &all[1].workflow), (1, 0));
        assert_eq!(standing(&all, &all[0].workflow), (0, 0));
    }

    #[test]
    fn what_this_operator_wrote_wins_over_a_lagging_cache() {
        let mut written = HashMap::new();
        written.insert("uid-b".to_string(), WorkflowPhase::Mining);
        written.insert("uid-a".to_string(), WorkflowPhase::Succeeded);
        let cached =
            vec![seen("a", 0, WorkflowPhase::Mining).workflow, seen("b", 1, WorkflowPhase::Pending).workflow];
        let phases: Vec<_> = freshest_phases(cached, &written).into_iter().map(|s| s.phase).collect();
        // The fixtures carry no status, so the cache would say Pending for both.
        assert_eq!(phases, [WorkflowPhase::Succeeded, WorkflowPhase::Mining]);
    }

    #[test]
    fn free_slots_go_to_the_oldest_waiting_workflows() {
        let mut cancelled = seen("x", -5, WorkflowPhase::Pending);
        Arc::make_mut(&mut cancelled.workflow).spec.cancel = true;
        let all = [
            seen("late", 9, WorkflowPhase::Pending),
            seen("busy", 0, WorkflowPhase::Mining),
            seen("early", 1, WorkflowPhase::Pending),
            cancelled,
            seen("middle", 5, WorkflowPhase::Pending),
        ];
        let names: Vec<_> = next_in_queue(&all, 3).iter().map(|w| w.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["early", "middle"]);
        assert!(next_in_queue(&all, 1).is_empty());
    }
}

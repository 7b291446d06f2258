//! A running step's slot given back: taken back by the queue for work that
//! waited (a preemptible tool's run), or given way at a full node.

use mining_api::{ToolRun, ToolRunPhase, ToolRunStatus};

use crate::admission::node::GiveWay;

/// The status of a run whose running step (its Job `uid`) gives its slot
/// back: queued again, the step to run again from its start.
pub(super) fn preempted(run: &ToolRun, uid: &str, seen: ToolRunStatus) -> ToolRunStatus {
    let step = match run.step() {
        0 => "it runs again from its start".to_string(),
        step => format!("its step {step} runs again from its start"),
    };
    ToolRunStatus {
        phase: Some(ToolRunPhase::Pending),
        message: Some(format!(
            "queued: gave its slot back to work that waited past the preemption delay (its tool is \
             preemptible); {step} when its turn comes"
        )),
        progress: Some(format!("0/{}", run.parts())),
        job_uid: None,
        preempted_job_uid: Some(uid.to_string()),
        preemptions: Some(seen.preemptions.unwrap_or(0).saturating_add(1)),
        ..seen
    }
}

/// The status of a run whose running step (its Job `uid`) waited for a
/// node and gives its slot back (`admission::node::gives_way`): queued
/// again, no preemption counted — the step never ran.
pub(super) fn gave_way(run: &ToolRun, uid: &str, seen: ToolRunStatus, give_way: GiveWay) -> ToolRunStatus {
    ToolRunStatus {
        phase: Some(ToolRunPhase::Pending),
        message: Some(give_way.message("tool run")),
        progress: Some(format!("0/{}", run.parts())),
        job_uid: None,
        preempted_job_uid: Some(uid.to_string()),
        ..seen
    }
}

//! What a run's spec and status say about it (accessors).

use super::{MAX_INPUT_DEADLINE_SECONDS, ToolRun, ToolRunPhase};

impl ToolRun {
    /// Where the run is; `Pending` until the operator has said.
    pub fn phase(&self) -> ToolRunPhase {
        self.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
    }

    /// The step its Job runs (0 until a round of answers moved it on).
    pub fn step(&self) -> u32 {
        self.status.as_ref().and_then(|s| s.step).unwrap_or(0)
    }

    /// The name of the Job of its current step: the run's own for the
    /// first, `{run}-s{step}` after each round of answers.
    pub fn job_name(&self) -> String {
        let name = self.metadata.name.clone().unwrap_or_default();
        match self.step() {
            0 => name,
            step => format!("{name}-s{step}"),
        }
    }

    /// Whether `name` and `uid` are those of a Job the operator made for
    /// this run: named for one of its steps so far and, for the current
    /// step once recorded, the uid in its status (a label or an
    /// ownerReference anyone in the namespace can write proves nothing).
    pub fn is_own_job(&self, name: &str, uid: &str) -> bool {
        let run = self.metadata.name.clone().unwrap_or_default();
        let step = match name.strip_prefix(&run) {
            Some("") => 0,
            Some(rest) => match rest.strip_prefix("-s").and_then(|n| n.parse::<u32>().ok()) {
                Some(step) if step > 0 && format!("-s{step}") == rest => step,
                _ => return false,
            },
            None => return false,
        };
        let recorded = self.status.as_ref().and_then(|s| s.job_uid.as_deref());
        match (step.cmp(&self.step()), recorded) {
            (std::cmp::Ordering::Greater, _) => false,
            (std::cmp::Ordering::Equal, Some(recorded)) => recorded == uid,
            _ => true,
        }
    }

    /// How long it may wait for its answers.
    pub fn input_deadline_seconds(&self) -> i64 {
        self.spec
            .input_deadline_seconds
            .unwrap_or(crate::tool_input::DEFAULT_INPUT_DEADLINE_SECONDS)
            .clamp(1, MAX_INPUT_DEADLINE_SECONDS)
    }

    /// How many indexed parts the run has (1 when the template says none).
    pub fn parts(&self) -> i32 {
        self.spec.job_template.spec.as_ref().and_then(|s| s.completions).unwrap_or(1).max(1)
    }
}

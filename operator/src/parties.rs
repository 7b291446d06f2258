//! Which party of the fair queue work of any kind belongs to, by proof.
//!
//! A caller label is anyone's to write, so the queue takes a workflow as its
//! MCP caller's only when it carries the frontend's ownership proof, checked
//! with the frontend's key (mounted read-only). Without a key, or without a
//! valid proof, a workflow queues with its namespace's direct creators.
//! Verdicts are remembered by uid and resourceVersion: a proof is checked
//! once per version of a workflow, not once per reconcile.

use mining_api::Work;
use std::collections::HashMap;
use std::sync::Mutex;

use mining_api::ownership::OwnershipKeys;

/// Remembered verdicts; the map starts over past this size (a verdict is
/// cheap to make again).
const MAX_VERDICTS: usize = 100_000;

pub struct Parties {
    keys: Option<OwnershipKeys>,
    /// uid → (resourceVersion, whether the proof verified).
    verdicts: Mutex<HashMap<String, (String, bool)>>,
    checks: std::sync::atomic::AtomicU64,
}

impl Parties {
    pub fn new(keys: Option<OwnershipKeys>) -> Self {
        Self { keys, verdicts: Mutex::new(HashMap::new()), checks: Default::default() }
    }

    /// The party `work` queues as.
    pub fn of<W: Work>(&self, work: &W) -> String {
        if work.caller_label().is_none() {
            return String::new();
        }
        match self.verdict(work) {
            true => work.caller_label().unwrap_or_default().to_string(),
            false => String::new(),
        }
    }

    /// Whether `work` carries the frontend's valid proof (never without the key).
    pub fn proves<W: Work>(&self, work: &W) -> bool {
        self.verdict(work)
    }

    /// The proof's verdict, checked once per version of an object (uids are
    /// unique across kinds): a proof binds the whole request, up to 32 KiB
    /// of template for a tool run, so checking each on every reconcile of
    /// every waiting one cost O(N²) MACs.
    fn verdict<W: Work>(&self, work: &W) -> bool {
        let Some(keys) = &self.keys else { return false };
        let meta = work.meta();
        let uid = meta.uid.clone().unwrap_or_default();
        let version = meta.resource_version.clone().unwrap_or_default();
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, proven)) = verdicts.get(&uid)
            && *seen == version
        {
            return *proven;
        }
        let proven = keys.proves(work);
        self.checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if verdicts.len() >= MAX_VERDICTS {
            verdicts.clear();
        }
        verdicts.insert(uid, (version, proven));
        proven
    }

    /// How many proofs were checked (not answered from memory).
    pub fn checks(&self) -> u64 {
        self.checks.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use mining_api::testing::WorkflowExt;
    use mining_api::{MiningWorkflow, annotations};

    use super::*;
    use crate::testing::workflow;

    fn keys() -> OwnershipKeys {
        OwnershipKeys::new(vec![5; 32], None).unwrap()
    }

    fn proven(name: &str, caller: &str) -> MiningWorkflow {
        let mut workflow = workflow(name, 8, 1).with_caller(caller);
        workflow.metadata.resource_version = Some("1".into());
        let proof = keys().proof(&workflow);
        workflow.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), proof)].into());
        workflow
    }

    #[test]
    fn only_a_proven_caller_is_a_party_of_its_own() {
        let parties = Parties::new(Some(keys()));
        assert_eq!(parties.of(&proven("w", "alice")), "alice");
        let mut relabelled = proven("w2", "alice");
        relabelled.metadata.labels.as_mut().unwrap().insert(mining_api::labels::CALLER.into(), "bob".into());
        assert_eq!(parties.of(&relabelled), "", "a proof moved to another caller");
        assert_eq!(parties.of(&workflow("w3", 8, 1).with_caller("carol")), "", "no proof");
        // Without the key nothing is proven: every workflow is direct.
        assert_eq!(Parties::new(None).of(&proven("w", "alice")), "");
    }

    #[test]
    fn a_new_version_of_a_workflow_is_checked_again() {
        let parties = Parties::new(Some(keys()));
        let mut workflow = proven("w", "alice");
        assert_eq!(parties.of(&workflow), "alice");
        workflow.spec.difficulty = 1;
        assert_eq!(parties.of(&workflow), "alice", "the same version: the remembered verdict");
        workflow.metadata.resource_version = Some("2".into());
        assert_eq!(parties.of(&workflow), "", "an edited workflow's proof no longer verifies");
    }

    #[test]
    fn a_thousand_waiting_runs_are_proven_once_each_not_once_per_reconcile() {
        use mining_api::testing::{ToolRunExt, tool_run};
        let parties = Parties::new(Some(keys()));
        let runs: Vec<mining_api::ToolRun> = (0..1000)
            .map(|i| {
                let mut run = tool_run(&format!("run-{i}"), "sum").with_caller("alice");
                run.metadata.resource_version = Some("1".into());
                let proof = keys().proof(&run);
                run.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), proof)].into());
                run
            })
            .collect();
        // Each waiting run's reconcile reads every run's party.
        for _reconcile in 0..5 {
            assert!(runs.iter().all(|run| parties.of(run) == "alice"));
        }
        assert_eq!(parties.checks(), 1000, "one MAC per run and version, not per reconcile");
    }
}

//! Which party of the fair queue a workflow belongs to, by proof.
//!
//! A caller label is anyone's to write, so the queue takes a workflow as its
//! MCP caller's only when it carries the frontend's ownership proof, checked
//! with the frontend's key (mounted read-only). Without a key, or without a
//! valid proof, a workflow queues with its namespace's direct creators.
//! Verdicts are remembered by uid and resourceVersion: a proof is checked
//! once per version of a workflow, not once per reconcile.

use mining_api::Work as _;
use std::collections::HashMap;
use std::sync::Mutex;

use mining_api::MiningWorkflow;
use mining_api::ownership::OwnershipKeys;

use crate::admission;

/// Remembered verdicts; the map starts over past this size (a verdict is
/// cheap to make again).
const MAX_VERDICTS: usize = 100_000;

pub struct Parties {
    keys: Option<OwnershipKeys>,
    /// uid → (resourceVersion, party).
    verdicts: Mutex<HashMap<String, (String, String)>>,
}

impl Parties {
    pub fn new(keys: Option<OwnershipKeys>) -> Self {
        Self { keys, verdicts: Mutex::new(HashMap::new()) }
    }

    /// The party `workflow` queues as.
    pub fn of(&self, workflow: &MiningWorkflow) -> String {
        let Some(keys) = &self.keys else { return String::new() };
        if workflow.caller_label().is_none() {
            return String::new();
        }
        let uid = workflow.metadata.uid.clone().unwrap_or_default();
        let version = workflow.metadata.resource_version.clone().unwrap_or_default();
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, party)) = verdicts.get(&uid)
            && *seen == version
        {
            return party.clone();
        }
        let party = admission::party(workflow, |w| keys.proves(w));
        if verdicts.len() >= MAX_VERDICTS {
            verdicts.clear();
        }
        verdicts.insert(uid, (version, party.clone()));
        party
    }
}

#[cfg(test)]
mod tests {
    use mining_api::annotations;
    use mining_api::testing::WorkflowExt;

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
}

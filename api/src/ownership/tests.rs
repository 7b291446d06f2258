use crate::MiningWorkflow;
use crate::labels;
use crate::testing::{self, WorkflowExt};

use super::*;

fn keys() -> OwnershipKeys {
    OwnershipKeys::new(vec![7; 32], None).unwrap()
}

fn signed(keys: &OwnershipKeys) -> MiningWorkflow {
    let mut workflow = testing::workflow("mw-x", 8, 2).with_caller("alice-label");
    let proof = keys.proof(&workflow);
    workflow.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), proof)].into());
    workflow
}

#[test]
fn a_request_state_answers_only_its_callers_retry_of_its_call_until_it_expires() {
    let keys = keys();
    let binding = ["alice", "greet", "args-digest"];
    let state = keys.request_state(binding, ["mw-run", "uid-1", "0"], 1_000);
    assert_ne!(state, keys.request_state(binding, ["mw-run", "uid-1", "1"], 1_000), "each round's differs");
    assert_eq!(keys.open_request_state(&state, binding, 999), Ok(("mw-run".into(), "uid-1".into())));
    assert_eq!(keys.open_request_state(&state, binding, 1_001), Err("it has expired"));
    for other in
        [["bob", "greet", "args-digest"], ["alice", "deploy", "args-digest"], ["alice", "greet", "x"]]
    {
        assert!(keys.open_request_state(&state, other, 999).unwrap_err().contains("does not verify"));
    }
    let tampered = format!("{state}-TAMPERED");
    assert!(keys.open_request_state(&tampered, binding, 999).is_err());
    let moved = state.replacen("mw-run", "mw-other", 1);
    assert!(keys.open_request_state(&moved, binding, 999).unwrap_err().contains("does not verify"));
    let later = state.replacen(".1000.", ".9999.", 1);
    assert!(keys.open_request_state(&later, binding, 2_000).is_err(), "the expiry is under the MAC");
    let rotated = OwnershipKeys::new(vec![9; 32], Some(vec![7; 32])).unwrap();
    assert!(rotated.open_request_state(&state, binding, 999).is_ok(), "the previous key still opens it");
    assert!(keys.open_request_state("rs1.a.b", binding, 0).is_err());
}

#[test]
fn caller_labels_are_keyed_and_the_unkeyed_one_is_still_read() {
    let keys = keys();
    let digest = "0123456789abcdef0123456789abcdef01234567";
    let label = keys.caller_label(digest);
    assert_eq!(label.len(), 40);
    assert!(label.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(label, digest, "a name's public digest is not its label");
    // Another key makes another label: without the key, no label can be computed.
    let other = OwnershipKeys::new(vec![8; 32], None).unwrap();
    assert_ne!(other.caller_label(digest), label);
    assert_eq!(keys.caller_labels(digest), [label.clone(), digest.to_string()]);
    // During a rotation the previous key's labels are read too, after the current one.
    let rotated = OwnershipKeys::new(vec![8; 32], Some(vec![7; 32])).unwrap();
    assert_eq!(rotated.caller_labels(digest), [other.caller_label(digest), label, digest.to_string()]);
}

#[test]
fn a_proof_verifies_only_for_what_it_was_made_for() {
    let keys = keys();
    let workflow = signed(&keys);
    assert!(keys.proves(&workflow));
    type Forgery = fn(&mut MiningWorkflow);
    let forgeries: [(&str, Forgery); 6] = [
        ("another caller", |w| {
            w.metadata.labels.as_mut().unwrap().insert(labels::CALLER.into(), "bob-label".into());
        }),
        ("another name", |w| w.metadata.name = Some("mw-y".into())),
        ("another namespace", |w| w.metadata.namespace = Some("other".into())),
        ("another difficulty", |w| w.spec.difficulty = 1),
        ("another length", |w| w.spec.blocks = 1),
        ("another parallelism", |w| w.spec.parallelism = 64),
    ];
    for (what, forge) in forgeries {
        let mut moved = workflow.clone();
        forge(&mut moved);
        assert!(!keys.proves(&moved), "a proof moved to {what} still verified");
    }
    let mut cancelled = workflow.clone();
    cancelled.spec.cancel = true;
    assert!(keys.proves(&cancelled), "a cancel is the frontend's own later write");
}

#[test]
fn no_proof_a_garbled_one_or_another_keys_is_no_proof() {
    let keys = keys();
    let mut workflow = signed(&keys);
    assert!(!OwnershipKeys::new(vec![8; 32], None).unwrap().proves(&workflow), "another frontend's key");
    for garbage in ["", "zz", &"0".repeat(64), &"é".repeat(32)] {
        workflow.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), garbage.into())].into());
        assert!(!keys.proves(&workflow), "{garbage:?}");
    }
    workflow.metadata.annotations = None;
    assert!(!keys.proves(&workflow));
}

#[test]
fn proofs_of_the_previous_key_verify_during_a_rotation() {
    let old = keys();
    let workflow = signed(&old);
    let rotated = OwnershipKeys::new(vec![9; 32], Some(vec![7; 32])).unwrap();
    assert!(rotated.proves(&workflow));
    assert_ne!(rotated.proof(&workflow), old.proof(&workflow), "new proofs use the new key");
    let done = OwnershipKeys::new(vec![9; 32], None).unwrap();
    assert!(!done.proves(&workflow), "the grace window ends with the previous key");
}

/// What the release before versioned proofs wrote for `signed(&keys())`,
/// computed independently (Python's hmac over the length-prefixed fields).
const PROOF_BEFORE_VERSIONS: &str = "bbb0e2e0a72b35fd407843c72275a634f53adb7470e543a408e4565c4785e82d";

fn with_proof(mut workflow: MiningWorkflow, proof: &str) -> MiningWorkflow {
    workflow.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), proof.into())].into());
    workflow
}

#[test]
fn an_upgrade_keeps_proofs_made_before_versions_and_makes_them_current_on_write() {
    let keys = keys();
    let old = with_proof(signed(&keys), PROOF_BEFORE_VERSIONS);
    assert_eq!(keys.proven_version(&old), Some(ProofVersion::V1), "yesterday's workflows stay visible");
    let reproof = keys.reproof(&old).expect("an old version is made again");
    assert!(reproof.starts_with("v2."), "{reproof}");
    let upgraded = with_proof(old.clone(), &reproof);
    assert_eq!(keys.proven_version(&upgraded), Some(ProofVersion::CURRENT));
    assert_eq!(keys.reproof(&upgraded), None, "a current proof is left as it is");
    let mut moved = old;
    moved.spec.difficulty = 1;
    assert!(!keys.proves(&moved), "an old proof still binds what it bound");
    assert_eq!(keys.reproof(&moved), None, "nothing unproven is ever proven anew");
}

#[test]
fn a_proof_verifies_only_under_the_version_it_names() {
    let keys = keys();
    let current = signed(&keys);
    let proof = current.annotation(annotations::OWNER_PROOF).unwrap().to_string();
    let bare = proof.strip_prefix("v2.").expect("new proofs name their version");
    assert!(!keys.proves(&with_proof(current.clone(), bare)), "a v2 MAC read as v1");
    assert!(!keys.proves(&with_proof(current.clone(), &format!("v3.{bare}"))), "an unknown version");
    let v1_as_v2 = format!("v2.{PROOF_BEFORE_VERSIONS}");
    assert!(!keys.proves(&with_proof(current, &v1_as_v2)), "a v1 MAC read as v2");
}

#[test]
fn short_keys_are_refused() {
    let err = OwnershipKeys::new(vec![1; 16], None).unwrap_err();
    assert!(err.contains("at least 32"), "{err}");
    assert!(OwnershipKeys::new(vec![1; 32], Some(vec![1; 3])).is_err());
}

#[test]
fn constant_time_eq_compares_contents() {
    assert!(constant_time_eq(b"abc", b"abc"));
    assert!(!constant_time_eq(b"abc", b"abd"));
    assert!(!constant_time_eq(b"abc", b"ab"));
}

fn proven_run(keys: &OwnershipKeys) -> crate::ToolRun {
    use crate::testing::ToolRunExt;
    let mut run = testing::tool_run("mw-x", "sum").with_caller("alice-label");
    let proof = keys.proof(&run);
    run.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), proof)].into());
    run
}

#[test]
fn a_tool_run_proof_binds_the_caller_and_the_whole_work() {
    let keys = keys();
    let run = proven_run(&keys);
    assert!(keys.proves(&run));
    assert!(!OwnershipKeys::new(vec![8; 32], None).unwrap().proves(&run), "another key");
    type Forgery = fn(&mut crate::ToolRun);
    let forgeries: [(&str, Forgery); 7] = [
        ("another caller", |r| {
            r.metadata.labels.as_mut().unwrap().insert(labels::CALLER.into(), "bob-label".into());
        }),
        ("other arguments", |r| r.spec.arguments = r#"{"x":1}"#.into()),
        ("another image", |r| {
            let pod = r.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
            pod.containers[0].image = Some("attacker/image".into());
        }),
        ("another ServiceAccount", |r| {
            let pod = r.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
            pod.service_account_name = Some("admin".into());
        }),
        ("another name", |r| r.metadata.name = Some("mw-y".into())),
        // Whoever may edit the run must not make its caller's work stoppable.
        ("made preemptible", |r| r.spec.preemptible = true),
        ("given a shorter start bound", |r| r.spec.pod_start_timeout_seconds = Some(1)),
    ];
    for (what, forge) in forgeries {
        let mut forged = run.clone();
        forge(&mut forged);
        assert!(!keys.proves(&forged), "{what}");
    }
    // A workflow's proof is no run's, whatever it covers.
    let workflow = signed(&keys);
    let mut moved = run.clone();
    moved.metadata.annotations = workflow.metadata.annotations.clone();
    assert!(!keys.proves(&moved));
}

/// What the release before versioned tool-run proofs wrote for
/// `proven_run`'s run under `keys()`, computed independently (Python's
/// hmac over "mining-operator.dev/tool-run-proof/v1", the length and the
/// run's JSON document).
const RUN_PROOF_BEFORE_VERSIONS: &str = "00b5e07117524264bbac3a342307fc5a169025b3c0caed053172f94efd7fd086";

#[test]
fn an_upgrade_keeps_tool_runs_proven_before_versions_and_proves_them_anew() {
    let keys = keys();
    let mut old = proven_run(&keys);
    old.metadata.annotations =
        Some([(annotations::OWNER_PROOF.to_string(), RUN_PROOF_BEFORE_VERSIONS.into())].into());
    assert_eq!(keys.proven_version(&old), Some(ProofVersion::V1), "yesterday's runs stay visible");
    assert_eq!(keys.proof_in(ProofVersion::V1, &old), RUN_PROOF_BEFORE_VERSIONS);
    let reproof = keys.reproof(&old).expect("an old version is made again");
    assert!(reproof.starts_with("v2."), "{reproof}");
    let mut upgraded = old.clone();
    upgraded.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), reproof)].into());
    assert_eq!(keys.proven_version(&upgraded), Some(ProofVersion::CURRENT));
    assert_eq!(keys.reproof(&upgraded), None, "a current proof is left as it is");
    // A workflow's v1 MAC under the run's name is no run's proof either.
    let mut forged = old.clone();
    forged.spec.arguments = r#"{"x":1}"#.into();
    assert_eq!(keys.reproof(&forged), None, "nothing unproven is ever proven anew");
}

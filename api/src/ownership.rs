//! Ownership only the frontend can assert (feature `proofs`).
//!
//! The frontend makes proofs with these keys; the operator, given the same
//! key read-only, verifies them to tell a caller's workflows (one party of
//! its fair queue each) from objects anyone created with a caller label.
//!
//! Anyone allowed to create MiningWorkflows can write any label, so a label
//! cannot say whose a workflow is. Every workflow the frontend creates
//! carries a proof instead: an HMAC, under a key only the frontend holds,
//! over its name, namespace, caller and spec. Without the key no one can
//! make a proof, and a proof moved to another object, caller or spec no
//! longer verifies. Workflow ids carry a MAC of their owner as well, so an id
//! is checked against its caller before any lookup: another caller's id, an
//! unknown id and a guessed one all cost nothing and look the same.
//!
//! Rotation: new proofs and ids use the current key; those made with the
//! previous key (when one is configured) still verify, for a grace window
//! that ends when the previous key is removed.

use std::path::Path;

use crate::annotations;
use crate::work::{ProofVersion, Work};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Shortest key accepted: 256 bits.
pub const MIN_KEY_BYTES: usize = 32;

/// The frontend's keys: the current one, and the previous one during a rotation.
#[derive(Clone)]
pub struct OwnershipKeys {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
}

impl std::fmt::Debug for OwnershipKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnershipKeys").field("previous", &self.previous.is_some()).finish_non_exhaustive()
    }
}

impl OwnershipKeys {
    pub fn new(current: Vec<u8>, previous: Option<Vec<u8>>) -> Result<Self, String> {
        for (which, key) in [("current", Some(&current)), ("previous", previous.as_ref())] {
            if let Some(key) = key
                && key.len() < MIN_KEY_BYTES
            {
                return Err(format!(
                    "the {which} ownership key has {} bytes; it needs at least {MIN_KEY_BYTES} \
                     (e.g. `head -c 32 /dev/urandom | base64`)",
                    key.len()
                ));
            }
        }
        Ok(Self { current, previous })
    }

    /// Reads the keys from files (a mounted Secret); surrounding whitespace is not part of a key.
    pub fn from_files(current: &Path, previous: Option<&Path>) -> Result<Self, String> {
        let read = |path: &Path| {
            std::fs::read(path)
                .map(|bytes| bytes.trim_ascii().to_vec())
                .map_err(|err| format!("reading the ownership key {}: {err}", path.display()))
        };
        let previous = match previous {
            Some(path) if path.exists() => Some(read(path)?).filter(|key| !key.is_empty()),
            _ => None,
        };
        Self::new(read(current)?, previous)
    }

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.current.as_slice()).chain(self.previous.as_deref())
    }

    /// The proof that the frontend made `work` as it is now, for its
    /// caller: the current version under the current key, in the kind's
    /// own domain (no workflow's proof is a run's, nor the reverse).
    pub fn proof<W: Work>(&self, work: &W) -> String {
        self.proof_in(ProofVersion::CURRENT, work)
    }

    /// The proof of `version` under the current key: what a release that
    /// made `version` wrote (upgrade tests make yesterday's proofs with it).
    pub fn proof_in<W: Work>(&self, version: ProofVersion, work: &W) -> String {
        version.encode(&hex(&mac(&self.current, W::proof_domain(version), &work.bound_parts(version))))
    }

    /// Whether `work` carries a proof made by this frontend (either key, an
    /// accepted version) for exactly its name, namespace, caller and request.
    pub fn proves<W: Work>(&self, work: &W) -> bool {
        self.proven_version(work).is_some()
    }

    /// The version of the valid proof `work` carries, if any.
    pub fn proven_version<W: Work>(&self, work: &W) -> Option<ProofVersion> {
        let (version, text) = ProofVersion::decode(work.annotation(annotations::OWNER_PROOF)?)?;
        if !ProofVersion::ACCEPTED.contains(&version) {
            return None;
        }
        let claimed = unhex(text)?;
        let parts = work.bound_parts(version);
        self.keys()
            .any(|key| mac_of(key, W::proof_domain(version), &parts).verify_slice(&claimed).is_ok())
            .then_some(version)
    }

    /// The current proof for `work` when it carries a valid proof of an
    /// older version: the frontend writes it back, so the next release,
    /// which accepts one version fewer, still sees all of it.
    pub fn reproof<W: Work>(&self, work: &W) -> Option<String> {
        let version = self.proven_version(work)?;
        (version != ProofVersion::CURRENT).then(|| self.proof(work))
    }

    /// The proof on a quota ledger: `text` as the frontend wrote it to the
    /// `MiningLedger` `name` in `namespace`.
    pub fn ledger_proof(&self, namespace: &str, name: &str, text: &str) -> String {
        hex(&mac(&self.current, "quota-ledger", &[namespace, name, text]))
    }

    /// Whether `proof` is the frontend's (either key) for this ledger.
    pub fn proves_ledger(&self, namespace: &str, name: &str, text: &str, proof: &str) -> bool {
        let Some(claimed) = unhex(proof) else { return false };
        self.keys()
            .any(|key| mac_of(key, "quota-ledger", &[namespace, name, text]).verify_slice(&claimed).is_ok())
    }

    /// The proof on a caller's answer: `response` as the frontend wrote it
    /// for request `key` of the run `run` (namespace, name, uid). Bound to
    /// the uid, so an answer copied to a run made again under the name, or
    /// to another key, no longer verifies.
    pub fn answer_proof(&self, run: [&str; 3], key: &str, response: &str) -> String {
        hex(&mac(&self.current, "tool-input/v1", &[run[0], run[1], run[2], key, response]))
    }

    /// Whether `proof` is the frontend's (either key) for this answer.
    pub fn proves_answer(&self, run: [&str; 3], key: &str, response: &str, proof: &str) -> bool {
        let Some(claimed) = unhex(proof) else { return false };
        let parts = [run[0], run[1], run[2], key, response];
        self.keys().any(|secret| mac_of(secret, "tool-input/v1", &parts).verify_slice(&claimed).is_ok())
    }

    /// The `requestState` of a plain call whose run asks (MCP 2026-07-28,
    /// SEP-2322): the run (name, uid) and an expiry, bound by a MAC to
    /// `binding` — the caller's digest, the tool, a digest of the call's
    /// arguments — so it answers only this caller's retry of this call.
    /// `run` is its name, uid and round (each round's state differs).
    pub fn request_state(&self, binding: [&str; 3], run: [&str; 3], expires: u64) -> String {
        let expires = expires.to_string();
        let tag = mac(&self.current, "request-state/v1", &request_state_parts(binding, run, &expires));
        format!("rs1.{}.{}.{}.{expires}.{}", run[0], run[1], run[2], hex(&tag))
    }

    /// The run (name, uid) a `requestState` names, if the frontend (either
    /// key) made it for `binding` and it has not expired at `now`; else why not.
    pub fn open_request_state(
        &self,
        state: &str,
        binding: [&str; 3],
        now: u64,
    ) -> Result<(String, String), &'static str> {
        let fields: Vec<&str> = state.split('.').collect();
        let [version, name, uid, round, expires, tag] = fields[..] else {
            return Err("it is not a requestState this server made");
        };
        let claimed =
            unhex(tag).filter(|_| version == "rs1").ok_or("it is not a requestState this server made")?;
        let parts = request_state_parts(binding, [name, uid, round], expires);
        if !self.keys().any(|key| mac_of(key, "request-state/v1", &parts).verify_slice(&claimed).is_ok()) {
            return Err(
                "it does not verify for this caller, tool and arguments (altered, or another call's)",
            );
        }
        match expires.parse::<u64>() {
            Ok(expires) if expires >= now => Ok((name.to_string(), uid.to_string())),
            _ => Err("it has expired"),
        }
    }

    /// The token a run's Pods upload its files with: bound to the run
    /// (namespace, name, uid), so it opens no other run's outputs, nor one
    /// made again under the name. Reaches the tool through the run's
    /// arguments Secret.
    pub fn outputs_upload_token(&self, run: [&str; 3]) -> String {
        hex(&mac(&self.current, "tool-outputs-upload/v1", &run))
    }

    /// Whether `token` uploads the files of `run` (either key).
    pub fn proves_outputs_upload(&self, run: [&str; 3], token: &str) -> bool {
        let Some(claimed) = unhex(token) else { return false };
        self.keys().any(|key| mac_of(key, "tool-outputs-upload/v1", &run).verify_slice(&claimed).is_ok())
    }

    /// The token the frontend reads one stored file of `run` with, until
    /// `expires` (Unix seconds): only the frontend and the operator hold the key.
    pub fn outputs_read_token(&self, run: [&str; 3], name: &str, expires: u64) -> String {
        let expires = expires.to_string();
        hex(&mac(&self.current, "tool-outputs-read/v1", &[run[0], run[1], run[2], name, &expires]))
    }

    /// Whether `token` reads `name` of `run` until `expires` (either key);
    /// the caller checks that `expires` has not passed.
    pub fn proves_outputs_read(&self, run: [&str; 3], name: &str, expires: u64, token: &str) -> bool {
        let Some(claimed) = unhex(token) else { return false };
        let expires = expires.to_string();
        let parts = [run[0], run[1], run[2], name, &expires];
        self.keys().any(|key| mac_of(key, "tool-outputs-read/v1", &parts).verify_slice(&claimed).is_ok())
    }

    /// The caller label a new workflow of the caller with `digest` carries:
    /// keyed, so nobody without the key can turn a caller's name into the
    /// label that finds their workflows (40 hex digits, a label value).
    pub fn caller_label(&self, digest: &str) -> String {
        caller_label_under(&self.current, digest)
    }

    /// Every label the caller's workflows may carry, the current one first:
    /// under each key (during a rotation), then the unkeyed digest that
    /// releases before keyed labels wrote. The proof still decides whose a
    /// workflow is; these only find the candidates.
    pub fn caller_labels(&self, digest: &str) -> Vec<String> {
        let mut labels: Vec<String> = self.keys().map(|key| caller_label_under(key, digest)).collect();
        labels.push(digest.to_string());
        labels
    }

    /// The MAC an id of `caller_label` with body `nonce` carries, under the current key.
    pub fn id_tag(&self, caller_label: &str, nonce: &str) -> [u8; 32] {
        mac(&self.current, "id", &[caller_label.as_bytes(), nonce.as_bytes()])
    }

    /// Every key's MAC for an id (current first), for checking a tag.
    pub fn id_tags(&self, caller_label: &str, nonce: &str) -> impl Iterator<Item = [u8; 32]> {
        self.keys().map(move |key| mac(key, "id", &[caller_label.as_bytes(), nonce.as_bytes()]))
    }

    /// The bytes an idempotency key stands for under each key (current first):
    /// only the frontend can compute them, so no one can predict another
    /// caller's id.
    pub fn idempotency_nonces(
        &self,
        caller_label: &str,
        key: &str,
        attempt: u8,
    ) -> impl Iterator<Item = [u8; 32]> {
        self.keys().map(move |secret| {
            mac(secret, "idempotency", &[caller_label.as_bytes(), key.as_bytes(), &[attempt]])
        })
    }
}

fn request_state_parts<'a>(binding: [&'a str; 3], run: [&'a str; 3], expires: &'a str) -> [&'a str; 7] {
    [binding[0], binding[1], binding[2], run[0], run[1], run[2], expires]
}

fn mac_of(key: &[u8], domain: &str, parts: &[impl AsRef<[u8]>]) -> HmacSha256 {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(b"mining-operator.dev/");
    mac.update(domain.as_bytes());
    for part in parts {
        // Length-prefixed, so no two field lists share an encoding.
        let part = part.as_ref();
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac
}

fn mac(key: &[u8], domain: &str, parts: &[impl AsRef<[u8]>]) -> [u8; 32] {
    mac_of(key, domain, parts).finalize().into_bytes().into()
}

fn caller_label_under(key: &[u8], digest: &str) -> String {
    hex(&mac(key, "caller-label", &[digest])[..20])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

/// Compares two byte strings in time that depends on their length only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
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
        assert_ne!(
            state,
            keys.request_state(binding, ["mw-run", "uid-1", "1"], 1_000),
            "each round's differs"
        );
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
            workflow.metadata.annotations =
                Some([(annotations::OWNER_PROOF.to_string(), garbage.into())].into());
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
    const RUN_PROOF_BEFORE_VERSIONS: &str =
        "00b5e07117524264bbac3a342307fc5a169025b3c0caed053172f94efd7fd086";

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
}

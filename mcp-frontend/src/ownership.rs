//! Ownership only the frontend can assert.
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

use hmac::{Hmac, KeyInit, Mac};
use mining_api::{MiningWorkflow, annotations};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Shortest key accepted: 256 bits.
pub const MIN_KEY_BYTES: usize = 32;

/// The frontend's keys: the current one, and the previous one during a rotation.
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

    /// The proof that the frontend made `workflow` as it is now.
    pub fn proof(&self, workflow: &MiningWorkflow) -> String {
        hex(&mac(&self.current, "workflow", &bound_fields(workflow)))
    }

    /// Whether `workflow` carries a proof made by this frontend (either key)
    /// for exactly its name, namespace, caller and spec.
    pub fn proves(&self, workflow: &MiningWorkflow) -> bool {
        let Some(claimed) = workflow.annotation(annotations::OWNER_PROOF).and_then(unhex) else {
            return false;
        };
        let fields = bound_fields(workflow);
        self.keys().any(|key| mac_of(key, "workflow", &fields).verify_slice(&claimed).is_ok())
    }

    /// The proof on a quota ledger: `text` as the frontend wrote it to the
    /// Lease `name` in `namespace`.
    pub fn ledger_proof(&self, namespace: &str, name: &str, text: &str) -> String {
        hex(&mac(&self.current, "quota-ledger", &[namespace, name, text]))
    }

    /// Whether `proof` is the frontend's (either key) for this ledger.
    pub fn proves_ledger(&self, namespace: &str, name: &str, text: &str, proof: &str) -> bool {
        let Some(claimed) = unhex(proof) else { return false };
        self.keys()
            .any(|key| mac_of(key, "quota-ledger", &[namespace, name, text]).verify_slice(&claimed).is_ok())
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

/// What a proof binds: change any of it, and the proof no longer verifies.
/// The progress token (2025-11-25 tasks) is bound too; `spec.cancel` is not,
/// since a cancel is this frontend's own later write.
fn bound_fields(workflow: &MiningWorkflow) -> Vec<Vec<u8>> {
    let spec = &workflow.spec;
    let number = |value: Option<i64>| value.map_or_else(|| b"-".to_vec(), |v| v.to_string().into_bytes());
    vec![
        workflow.metadata.name.clone().unwrap_or_default().into_bytes(),
        workflow.metadata.namespace.clone().unwrap_or_default().into_bytes(),
        workflow.caller_label().unwrap_or_default().as_bytes().to_vec(),
        spec.difficulty.to_string().into_bytes(),
        spec.blocks.to_string().into_bytes(),
        spec.parallelism.to_string().into_bytes(),
        number(spec.ttl_seconds_after_finished),
        number(spec.active_deadline_seconds),
        workflow.annotation(annotations::PROGRESS_TOKEN).unwrap_or_default().as_bytes().to_vec(),
    ]
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
    use mining_api::labels;
    use mining_api::testing::{self, WorkflowExt};

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
}

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
mod tests;

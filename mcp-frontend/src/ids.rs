//! Workflow ids and caller identities.
//!
//! A workflow id is the `MiningWorkflow`'s name: `mw-`, 16 base32 digits of
//! nonce (80 bits) and 10 of tag (50 bits). The nonce comes from the
//! operating system's random source, or, with an idempotency key, from an
//! HMAC of the caller and the key under the frontend's secret (so two
//! replicas racing on the same retry create the same name, and no one else
//! can compute it). The tag is an HMAC of the caller and the nonce: an id is
//! checked against its caller before any lookup, so another caller's id
//! answers `not_found` at once, with no API call, exactly like an unknown one.

use sha2::{Digest, Sha256};

use crate::ownership::{OwnershipKeys, constant_time_eq};

const PREFIX: &str = "mw-";
const NONCE_LEN: usize = 16;
const TAG_LEN: usize = 10;
const BODY_LEN: usize = NONCE_LEN + TAG_LEN;
const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Longest idempotency key accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 128;

/// A well-formed workflow id (not necessarily one that exists).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkId(String);

impl WorkId {
    /// A fresh id of `caller`'s from the operating system's random source.
    pub fn random(keys: &OwnershipKeys, caller: &Caller) -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 10];
        getrandom::fill(&mut bytes)?;
        Ok(Self::tagged(keys, caller, base32(&bytes, NONCE_LEN)))
    }

    /// The ids a caller's idempotency key stands for, current key first (a
    /// rotation's previous key after): the same for every replica and every
    /// retry, different for every caller and key. `attempt` numbers the
    /// fallbacks used when an id is taken by an object the frontend did not make.
    pub fn for_idempotency_key(keys: &OwnershipKeys, caller: &Caller, key: &str, attempt: u8) -> Vec<Self> {
        keys.idempotency_nonces(&caller.digest, key, attempt)
            .map(|nonce| Self::tagged(keys, caller, base32(&nonce, NONCE_LEN)))
            .collect()
    }

    fn tagged(keys: &OwnershipKeys, caller: &Caller, nonce: String) -> Self {
        let tag = base32(&keys.id_tag(&caller.digest, &nonce), TAG_LEN);
        Self(format!("{PREFIX}{nonce}{tag}"))
    }

    /// `Some` only for an id in exactly the form this server hands out whose
    /// tag says it is `caller`'s: what this returns `None` for is `not_found`
    /// without asking anyone. The work does not depend on whether such a
    /// workflow exists.
    pub fn parse_for(keys: &OwnershipKeys, caller: &Caller, text: &str) -> Option<Self> {
        let id = Self::parse(text)?;
        let body = &id.0[PREFIX.len()..];
        let (nonce, tag) = body.split_at(NONCE_LEN);
        let mut matched = false;
        for expected in keys.id_tags(&caller.digest, nonce) {
            matched |= constant_time_eq(base32(&expected, TAG_LEN).as_bytes(), tag.as_bytes());
        }
        matched.then_some(id)
    }

    /// `Some` for text in exactly the form this server hands out (any caller's).
    pub fn parse(text: &str) -> Option<Self> {
        let body = text.strip_prefix(PREFIX)?;
        (body.len() == BODY_LEN && body.bytes().all(|b| ALPHABET.contains(&b)))
            .then(|| Self(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The leading `len` base32 digits of `bytes`, most significant bit first
/// (5 bits a digit: `bytes` must hold at least `5 * len` bits).
fn base32(bytes: &[u8], len: usize) -> String {
    let mut digits = String::with_capacity(len);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for &byte in bytes {
        if digits.len() == len {
            break;
        }
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 && digits.len() < len {
            bits -= 5;
            digits.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
        buffer &= (1 << bits) - 1;
    }
    debug_assert_eq!(digits.len(), len, "enough bytes go in");
    digits
}

impl std::fmt::Display for WorkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who is calling: a name for logs and a digest of it that scopes the
/// caller's ids and waits. A name never lands in the cluster; nor does the
/// digest on new workflows, whose label is keyed
/// (`OwnershipKeys::caller_label`), so nobody can compute it from a name.
#[derive(Clone, Debug)]
pub struct Caller {
    pub name: String,
    pub digest: String,
    /// What the credential said besides the name: what restricted tools'
    /// grants are checked against and what a tool that asks is told.
    pub identity: std::sync::Arc<Identity>,
}

/// Two callers are the same caller when their names are: what else a
/// credential says (groups, claims) may differ from one token to the next.
impl PartialEq for Caller {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.digest == other.digest
    }
}

impl Eq for Caller {}

/// What a credential said of its holder besides the name (empty for the
/// anonymous caller and `tokens` mode).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The TokenReview's `uid` (`kubernetes` mode).
    pub uid: Option<String>,
    /// The TokenReview's groups, or the token's `groups` claim (`oidc`).
    pub groups: Vec<String>,
    /// The TokenReview's `extra` (`kubernetes` mode), for the RBAC review.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
    /// The claims a tool may be handed (`callerIdentity.claims`): the
    /// verified token's (`oidc`), or `uid` and `groups` (`kubernetes`).
    pub claims: serde_json::Map<String, serde_json::Value>,
}

impl Caller {
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        let digest = Sha256::new()
            .chain_update(b"mining-operator.dev/caller\0")
            .chain_update(name.as_bytes())
            .finalize();
        // 40 hex digits (160 bits): the label value releases before keyed labels wrote.
        let digest_hex = digest[..20].iter().map(|b| format!("{b:02x}")).collect();
        Self { name, digest: digest_hex, identity: Default::default() }
    }

    /// The same caller, with what its credential said besides the name.
    pub fn with_identity(mut self, identity: Identity) -> Self {
        self.identity = std::sync::Arc::new(identity);
        self
    }

    /// The one caller of a server that runs without authentication.
    pub fn anonymous() -> Self {
        Self::new("anonymous")
    }
}

/// Checks an idempotency key; the error says what is allowed.
pub fn check_idempotency_key(key: &str) -> Result<(), String> {
    let length = key.chars().count();
    if length == 0 || length > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(format!(
            "idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters long (got {length})"
        ));
    }
    if key.chars().any(char::is_control) {
        return Err("idempotency_key must not contain control characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> OwnershipKeys {
        OwnershipKeys::new(vec![5; 32], None).unwrap()
    }

    #[test]
    fn random_ids_are_well_formed_distinct_and_their_callers_only() {
        let (keys, alice, bob) = (keys(), Caller::new("alice"), Caller::new("bob"));
        let ids: std::collections::HashSet<_> =
            (0..1000).map(|_| WorkId::random(&keys, &alice).unwrap()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(WorkId::parse_for(&keys, &alice, id.as_str()).as_ref(), Some(id));
            assert_eq!(WorkId::parse_for(&keys, &bob, id.as_str()), None, "bob cannot use alice's id");
            assert_eq!(id.as_str().len(), PREFIX.len() + BODY_LEN);
        }
        let other_frontend = OwnershipKeys::new(vec![6; 32], None).unwrap();
        let id = ids.iter().next().unwrap();
        assert_eq!(WorkId::parse_for(&other_frontend, &alice, id.as_str()), None);
    }

    #[test]
    fn a_changed_digit_breaks_the_tag() {
        let (keys, alice) = (keys(), Caller::new("alice"));
        let id = WorkId::random(&keys, &alice).unwrap();
        for position in PREFIX.len()..id.as_str().len() {
            let mut forged = id.as_str().as_bytes().to_vec();
            forged[position] = if forged[position] == b'a' { b'b' } else { b'a' };
            let forged = String::from_utf8(forged).unwrap();
            assert_eq!(WorkId::parse_for(&keys, &alice, &forged), None, "{forged}");
        }
    }

    #[test]
    fn idempotency_ids_depend_on_caller_key_attempt_and_secret() {
        let (keys, alice, bob) = (keys(), Caller::new("alice"), Caller::new("bob"));
        let first = WorkId::for_idempotency_key(&keys, &alice, "retry-1", 0);
        assert_eq!(first, WorkId::for_idempotency_key(&keys, &alice, "retry-1", 0));
        assert_ne!(first, WorkId::for_idempotency_key(&keys, &alice, "retry-2", 0));
        assert_ne!(first, WorkId::for_idempotency_key(&keys, &alice, "retry-1", 1));
        assert_ne!(first, WorkId::for_idempotency_key(&keys, &bob, "retry-1", 0));
        let other = OwnershipKeys::new(vec![6; 32], None).unwrap();
        assert_ne!(first, WorkId::for_idempotency_key(&other, &alice, "retry-1", 0), "needs the secret");
        assert!(WorkId::parse_for(&keys, &alice, first[0].as_str()).is_some());
        // During a rotation the previous key's id comes second, and still parses.
        let rotated = OwnershipKeys::new(vec![6; 32], Some(vec![5; 32])).unwrap();
        let both = WorkId::for_idempotency_key(&rotated, &alice, "retry-1", 0);
        assert_eq!(both.len(), 2);
        assert!(WorkId::parse_for(&rotated, &alice, first[0].as_str()).is_some());
    }

    #[test]
    fn base32_encodes_the_leading_bits() {
        assert_eq!(base32(&[0u8; 17], 26), "a".repeat(26));
        assert_eq!(base32(&[0xff; 17], 26), "7".repeat(26));
        // 0b00001_00010_... : the first two digits are 1 and 2.
        let mut bytes = [0u8; 17];
        bytes[0] = 0b0000_1000;
        bytes[1] = 0b1000_0000;
        assert!(base32(&bytes, 26).starts_with("bc"));
        assert_eq!(base32(&[0u8; 10], 16).len(), 16);
    }

    #[test]
    fn malformed_ids_are_refused() {
        for text in [
            "",
            "mw-",
            "demo",
            "mw-abc",
            &format!("mw-{}", "A".repeat(26)),
            &format!("mw-{}", "1".repeat(26)),
            &format!("mw-{}", "a".repeat(27)),
            &format!("xx-{}", "a".repeat(26)),
            "mw-aaaaaaaaaaaaaaaaaaaaaaaaa\u{e9}",
        ] {
            assert_eq!(WorkId::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn caller_labels_are_label_values_and_hide_the_name() {
        let caller = Caller::new("system:serviceaccount:team-a:agent");
        assert_eq!(caller.digest.len(), 40);
        assert!(caller.digest.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(caller.digest, Caller::new("system:serviceaccount:team-b:agent").digest);
    }

    #[test]
    fn idempotency_keys_are_bounded_and_printable() {
        assert!(check_idempotency_key("job-42").is_ok());
        assert!(check_idempotency_key(&"k".repeat(128)).is_ok());
        assert!(check_idempotency_key("").unwrap_err().contains("1 to 128"));
        assert!(check_idempotency_key(&"k".repeat(129)).is_err());
        assert!(check_idempotency_key("a\nb").is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_accepts_only_what_it_hands_out(text in ".{0,40}") {
            if let Some(id) = WorkId::parse(&text) {
                prop_assert_eq!(id.as_str(), text.as_str());
                prop_assert!(text.starts_with("mw-") && text.len() == 29);
            }
        }
    }
}

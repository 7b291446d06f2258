//! Workflow ids and caller identities.
//!
//! A workflow id is the `MiningWorkflow`'s name: `mw-` and 26 base32 digits
//! (130 bits). Without an idempotency key the bits come from the operating
//! system's random source; with one they are a SHA-256 of the caller and the
//! key, so two replicas racing on the same retry create the same name and the
//! API server lets only one of them win.

use sha2::{Digest, Sha256};

const PREFIX: &str = "mw-";
const BODY_LEN: usize = 26;
const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Longest idempotency key accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 128;

/// A well-formed workflow id (not necessarily one that exists).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkflowId(String);

impl WorkflowId {
    /// A fresh id from the operating system's random source.
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 17];
        getrandom::fill(&mut bytes)?;
        Ok(Self::from_bytes(&bytes))
    }

    /// The id a caller's idempotency key stands for: the same for every
    /// replica and every retry, different for every caller and key.
    pub fn for_idempotency_key(caller: &Caller, key: &str) -> Self {
        let digest = Sha256::new()
            .chain_update(b"mining-operator.dev/idempotency\0")
            .chain_update(caller.label.as_bytes())
            .chain_update(b"\0")
            .chain_update(key.as_bytes())
            .finalize();
        Self::from_bytes(&digest)
    }

    /// `Some` only for text in exactly the form this server hands out, so a
    /// garbled id is answered without asking the API server.
    pub fn parse(text: &str) -> Option<Self> {
        let body = text.strip_prefix(PREFIX)?;
        (body.len() == BODY_LEN && body.bytes().all(|b| ALPHABET.contains(&b)))
            .then(|| Self(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        // 5 bits a digit, most significant first; 26 digits need 130 bits.
        let mut body = String::with_capacity(BODY_LEN);
        let (mut buffer, mut bits) = (0u32, 0u32);
        for &byte in bytes {
            if body.len() == BODY_LEN {
                break;
            }
            buffer = (buffer << 8) | u32::from(byte);
            bits += 8;
            while bits >= 5 && body.len() < BODY_LEN {
                bits -= 5;
                body.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
            }
            buffer &= (1 << bits) - 1;
        }
        debug_assert_eq!(body.len(), BODY_LEN, "at least 17 bytes go in");
        Self(format!("{PREFIX}{body}"))
    }
}

impl std::fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who is calling: a name for logs and the label value that scopes what the
/// caller may see. The label is a hash, so a name never lands in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub label: String,
}

impl Caller {
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        let digest = Sha256::new()
            .chain_update(b"mining-operator.dev/caller\0")
            .chain_update(name.as_bytes())
            .finalize();
        // 40 hex digits (160 bits) fit a label value (63 at most).
        let label = digest[..20].iter().map(|b| format!("{b:02x}")).collect();
        Self { name, label }
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

    #[test]
    fn random_ids_are_well_formed_and_distinct() {
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| WorkflowId::random().unwrap()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(WorkflowId::parse(id.as_str()).as_ref(), Some(id));
            assert_eq!(id.as_str().len(), PREFIX.len() + BODY_LEN);
        }
    }

    #[test]
    fn idempotency_ids_depend_on_caller_and_key_only() {
        let (alice, bob) = (Caller::new("alice"), Caller::new("bob"));
        let first = WorkflowId::for_idempotency_key(&alice, "retry-1");
        assert_eq!(first, WorkflowId::for_idempotency_key(&alice, "retry-1"));
        assert_ne!(first, WorkflowId::for_idempotency_key(&alice, "retry-2"));
        assert_ne!(first, WorkflowId::for_idempotency_key(&bob, "retry-1"));
        assert!(WorkflowId::parse(first.as_str()).is_some());
    }

    #[test]
    fn base32_encodes_the_leading_bits() {
        assert_eq!(WorkflowId::from_bytes(&[0u8; 17]).as_str(), format!("mw-{}", "a".repeat(26)));
        assert_eq!(WorkflowId::from_bytes(&[0xff; 17]).as_str(), format!("mw-{}", "7".repeat(26)));
        // 0b00001_00010_... : the first two digits are 1 and 2.
        let mut bytes = [0u8; 17];
        bytes[0] = 0b0000_1000;
        bytes[1] = 0b1000_0000;
        assert!(WorkflowId::from_bytes(&bytes).as_str().starts_with("mw-bc"));
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
            assert_eq!(WorkflowId::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn caller_labels_are_label_values_and_hide_the_name() {
        let caller = Caller::new("system:serviceaccount:team-a:agent");
        assert_eq!(caller.label.len(), 40);
        assert!(caller.label.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(caller.label, Caller::new("system:serviceaccount:team-b:agent").label);
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
            if let Some(id) = WorkflowId::parse(&text) {
                prop_assert_eq!(id.as_str(), text.as_str());
                prop_assert!(text.starts_with("mw-") && text.len() == 29);
            }
        }
    }
}

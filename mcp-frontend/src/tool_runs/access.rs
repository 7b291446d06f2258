//! Who may call which defined tool (the rules are `mining_api::tool_caller`'s):
//! a tool is restricted when its definition says so or the install says
//! every tool is (`--tool-access restricted`, which no definition can
//! lift); a restricted tool is offered, called and followed only by callers
//! granted it — by RBAC in `kubernetes` mode, by the `--tool-grants` file
//! otherwise. Verdicts are remembered per caller and tool like admissions
//! (granted ones for `--auth-cache-seconds`, refused ones briefly), bounded.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mining_api::tool_caller::{CALL_VERB, TOOLS_RESOURCE};
use serde::Deserialize;

use crate::auth::kubernetes::NEGATIVE_CACHE_TTL;
use crate::auth::{KubernetesReviews, Refusal};
use crate::ids::Caller;

/// Bound on remembered verdicts (caller × tool).
const VERDICTS_MAX: usize = 10_000;
/// Largest `--tool-grants` file read.
pub const MAX_GRANTS_BYTES: u64 = 1024 * 1024;

/// Which tools need a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AccessMode {
    /// Only tools whose definition says `restricted: true`.
    #[default]
    Open,
    /// Every defined tool (the mining tools keep needing only the MCP permission).
    Restricted,
}

/// The `--tool-grants` file: tool name → who may call it.
#[derive(Debug, Default, Deserialize)]
pub struct ToolGrants(BTreeMap<String, Grant>);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Callers by name, as the frontend names them (`tokens`: the name in the
    /// tokens file; `oidc`: `ISSUER#CLAIM`).
    #[serde(default)]
    subjects: Vec<String>,
    /// Groups (`oidc`: the token's `groups` claim).
    #[serde(default)]
    groups: Vec<String>,
}

impl ToolGrants {
    /// Reads the file (JSON: `{"deploy": {"subjects": [...], "groups": [...]}}`).
    pub fn read(path: &Path) -> Result<Self, String> {
        let size = std::fs::metadata(path).map_err(|e| format!("reading {}: {e}", path.display()))?.len();
        if size > MAX_GRANTS_BYTES {
            return Err(format!("{} is {size} bytes; at most {MAX_GRANTS_BYTES} are read", path.display()));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|why| format!("{}: {why}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| {
            format!(
                "not a tool grants document ({{\"TOOL\": {{\"subjects\": [..], \"groups\": [..]}}}}): {e}"
            )
        })
    }

    fn grants(&self, caller: &Caller, tool: &str) -> bool {
        self.0.get(tool).is_some_and(|grant| {
            grant.subjects.contains(&caller.name)
                || caller.identity.groups.iter().any(|g| grant.groups.contains(g))
        })
    }
}

/// Who says whether a caller has a tool.
pub enum Grantor {
    /// `kubernetes` mode: a SubjectAccessReview of verb `call` on `mcptools/NAME`.
    Rbac(Arc<KubernetesReviews>),
    /// The other modes: the grants file.
    Listed(ToolGrants),
}

/// Why a caller may not call (or follow) a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// It is restricted and the caller is not granted it; the text names the grant.
    NotGranted(String),
    /// The grant could not be checked now; the text says when to retry.
    CannotCheck(String),
}

impl Denied {
    pub fn text(self) -> String {
        match self {
            Self::NotGranted(text) | Self::CannotCheck(text) => text,
        }
    }
}

pub struct ToolAccess {
    mode: AccessMode,
    grantor: Grantor,
    granted_ttl: Duration,
    verdicts: Mutex<HashMap<(String, String), (bool, Instant)>>,
}

impl ToolAccess {
    pub fn new(mode: AccessMode, grantor: Grantor, granted_ttl: Duration) -> Self {
        Self { mode, grantor, granted_ttl, verdicts: Mutex::default() }
    }

    /// No tool restricted beyond what definitions say, and no grants (tests, benchmarks).
    pub fn open() -> Self {
        Self::new(AccessMode::Open, Grantor::Listed(ToolGrants::default()), Duration::from_secs(30))
    }

    /// Whether a tool defined with `restricted` needs a grant here.
    pub fn is_restricted(&self, restricted: bool) -> bool {
        restricted || self.mode == AccessMode::Restricted
    }

    /// `Ok` when `caller` may call `tool` (restricted or not, as
    /// [`Self::is_restricted`] said); else the refusal, which names the
    /// missing grant and nobody else.
    pub async fn check(&self, caller: &Caller, tool: &str, restricted: bool) -> Result<(), Denied> {
        if !self.is_restricted(restricted) {
            return Ok(());
        }
        let key = (caller.digest.clone(), tool.to_string());
        if let Some(granted) = self.remembered(&key) {
            return if granted { Ok(()) } else { Err(Denied::NotGranted(self.denied(tool))) };
        }
        let granted = match &self.grantor {
            Grantor::Listed(grants) => grants.grants(caller, tool),
            Grantor::Rbac(reviews) => match reviews.may_call_tool(caller, tool).await {
                Ok(granted) => granted,
                Err(Refusal::Busy) => {
                    return Err(Denied::CannotCheck(format!(
                        "cannot check the grant for tool {tool} now: too many reviews are running; retry in 1 \
                         second"
                    )));
                }
                Err(refusal) => {
                    return Err(Denied::CannotCheck(format!(
                        "cannot check the grant for tool {tool} now ({refusal:?}); retry in 5 seconds"
                    )));
                }
            },
        };
        self.remember(key, granted);
        if granted { Ok(()) } else { Err(Denied::NotGranted(self.denied(tool))) }
    }

    fn denied(&self, tool: &str) -> String {
        match &self.grantor {
            Grantor::Rbac(reviews) => format!(
                "tool {tool} is restricted: calling it, or following its runs, needs the RBAC verb \
                 {CALL_VERB:?} on {TOOLS_RESOURCE}/{tool} (API group {}) in namespace {}; ask an \
                 administrator for a Role that grants it",
                mining_api::GROUP,
                reviews.namespace()
            ),
            Grantor::Listed(_) => format!(
                "tool {tool} is restricted: calling it, or following its runs, needs a grant in the \
                 frontend's tool grants (--tool-grants) for this caller or one of its groups; ask an \
                 administrator"
            ),
        }
    }

    fn remembered(&self, key: &(String, String)) -> Option<bool> {
        let verdicts = self.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        let (granted, at) = verdicts.get(key)?;
        let ttl = if *granted { self.granted_ttl } else { NEGATIVE_CACHE_TTL };
        (at.elapsed() < ttl).then_some(*granted)
    }

    fn remember(&self, key: (String, String), granted: bool) {
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        if verdicts.len() >= VERDICTS_MAX {
            let ttl = self.granted_ttl.max(NEGATIVE_CACHE_TTL);
            verdicts.retain(|_, (_, at)| at.elapsed() < ttl);
            if verdicts.len() >= VERDICTS_MAX {
                verdicts.clear();
            }
        }
        verdicts.insert(key, (granted, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Identity;

    fn grants() -> ToolGrants {
        ToolGrants::parse(r#"{"deploy": {"subjects": ["alice"], "groups": ["ops"]}, "open": {}}"#).unwrap()
    }

    fn caller(name: &str, groups: &[&str]) -> Caller {
        let identity =
            Identity { groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() };
        Caller::new(name).with_identity(identity)
    }

    #[tokio::test]
    async fn a_restricted_tool_is_for_the_subjects_and_groups_granted_it() {
        let access = ToolAccess::new(AccessMode::Open, Grantor::Listed(grants()), Duration::from_secs(30));
        assert_eq!(access.check(&caller("alice", &[]), "deploy", true).await, Ok(()));
        assert_eq!(access.check(&caller("carol", &["dev", "ops"]), "deploy", true).await, Ok(()));
        let refused = access.check(&caller("bob", &["dev"]), "deploy", true).await.unwrap_err().text();
        assert!(refused.contains("--tool-grants") && refused.contains("deploy"), "{refused}");
        assert!(!refused.contains("bob") && !refused.contains("alice"), "names nobody: {refused}");
        // Not restricted: anyone who may use the frontend.
        assert_eq!(access.check(&caller("bob", &[]), "other", false).await, Ok(()));
        // A grant of one tool is not a grant of another.
        assert!(access.check(&caller("alice", &["ops"]), "other", true).await.is_err());
    }

    #[tokio::test]
    async fn the_install_can_restrict_every_tool_and_no_definition_lifts_it() {
        let access =
            ToolAccess::new(AccessMode::Restricted, Grantor::Listed(grants()), Duration::from_secs(30));
        assert!(access.is_restricted(false));
        assert!(access.check(&caller("bob", &[]), "open", false).await.is_err(), "listed with nobody");
        assert_eq!(access.check(&caller("alice", &[]), "deploy", false).await, Ok(()));
    }

    #[test]
    fn a_grants_file_with_an_unknown_field_is_refused_whole() {
        let why = ToolGrants::parse(r#"{"deploy": {"subject": ["alice"]}}"#).unwrap_err();
        assert!(why.contains("unknown field"), "{why}");
        assert!(ToolGrants::parse("deploy: alice").is_err());
    }

    #[test]
    fn verdicts_stay_bounded() {
        let access = ToolAccess::open();
        for i in 0..(VERDICTS_MAX + 10) {
            access.remember((format!("c{i}"), "t".into()), true);
        }
        assert!(access.verdicts.lock().unwrap().len() <= VERDICTS_MAX);
    }
}

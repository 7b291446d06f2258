//! `--auth kubernetes`: a `TokenReview`, bound to the frontend's own
//! audiences, says who the token belongs to, and a `SubjectAccessReview`
//! requires that identity to hold the MCP permission (verb `use` on
//! `miningworkflows/mcp`, which grants no API access) in the namespace.
//!
//! Tokens must be minted for one of `--token-audiences` (`kubectl create
//! token SA --audience mining-operator`): such a token is refused by the API
//! server itself, so one that leaks from a client, or crosses the Service's
//! plain HTTP, cannot be replayed against the cluster. A token for the API
//! server's own audience is refused here for the same reason.
//!
//! Verdicts are cached by token digest: admitted ones for `--auth-cache-seconds`
//! (so a revocation shows within that), refused ones briefly, so a client
//! retrying a bad token does not cost a review each time. The two are kept
//! apart, so a flood of bad tokens never pushes out a caller's admission.
//! At most [`MAX_REVIEWS_IN_FLIGHT`] reviews run at once, and at most
//! [`MAX_REVIEWS_PER_SOURCE`] for one source address; beyond that a request
//! is told to retry instead of queueing on the API server.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use mining_api::{mcp_permission, tool_caller};
use tokio::sync::Semaphore;

use super::{Refusal, digest};
use crate::ids::{Caller, Identity};
use crate::serve::{Source, SourceShares};

/// How long a refusal is remembered (a revoked token stays refused anyway).
pub const NEGATIVE_CACHE_TTL: Duration = Duration::from_secs(10);
/// Bound on remembered verdicts of each kind.
const REVIEW_CACHE_MAX: usize = 10_000;
/// Reviews sent to the API server at once, over every caller.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 32;
/// ... and for one source address, so one client cannot take them all.
pub const MAX_REVIEWS_PER_SOURCE: usize = 4;

/// A refusal that can be told again without another review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RememberedRefusal {
    InvalidToken,
    Forbidden,
    /// A ServiceAccount of the workflow namespace (see [`runs_where_work_runs`]).
    WorkloadIdentity,
}

/// Whether `username` is a ServiceAccount of `namespace`, the namespace
/// where tool authors' Pods run: any such Pod may name any ServiceAccount
/// there and mint its token for any audience, so none of them can be an
/// MCP caller (else a tool author would become whoever it named).
pub fn runs_where_work_runs(username: &str, namespace: &str) -> bool {
    username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(account_namespace, _)| account_namespace == namespace)
}

/// Verdicts by token digest, admitted and refused apart: each bounded, and
/// the refused ones (which anyone can make) never evict an admitted one.
pub struct VerdictCache {
    admitted_ttl: Duration,
    admitted: HashMap<[u8; 32], (Caller, Instant)>,
    refused: HashMap<[u8; 32], (RememberedRefusal, Instant)>,
}

impl VerdictCache {
    pub fn new(admitted_ttl: Duration) -> Self {
        Self { admitted_ttl, admitted: HashMap::new(), refused: HashMap::new() }
    }

    pub fn get(&self, key: &[u8; 32]) -> Option<Result<Caller, RememberedRefusal>> {
        if let Some((caller, at)) = self.admitted.get(key)
            && at.elapsed() < self.admitted_ttl
        {
            return Some(Ok(caller.clone()));
        }
        match self.refused.get(key) {
            Some((refusal, at)) if at.elapsed() < NEGATIVE_CACHE_TTL => Some(Err(*refusal)),
            _ => None,
        }
    }

    pub fn admit(&mut self, key: [u8; 32], caller: Caller) {
        let ttl = self.admitted_ttl;
        if self.admitted.len() >= REVIEW_CACHE_MAX {
            self.admitted.retain(|_, (_, at)| at.elapsed() < ttl);
        }
        // Still full of live admissions: this one is reviewed again next
        // time rather than pushing out another caller's.
        if self.admitted.len() < REVIEW_CACHE_MAX {
            self.refused.remove(&key);
            self.admitted.insert(key, (caller, Instant::now()));
        }
    }

    pub fn refuse(&mut self, key: [u8; 32], refusal: RememberedRefusal) {
        if self.refused.len() >= REVIEW_CACHE_MAX {
            self.refused.retain(|_, (_, at)| at.elapsed() < NEGATIVE_CACHE_TTL);
            if self.refused.len() >= REVIEW_CACHE_MAX {
                self.refused.clear();
            }
        }
        self.admitted.remove(&key);
        self.refused.insert(key, (refusal, Instant::now()));
    }
}

/// Kubernetes TokenReview + SubjectAccessReview, with a short cache.
pub struct KubernetesReviews {
    client: kube::Client,
    namespace: String,
    /// Where callers were bound before an upgrade moved the workflows (the
    /// release namespace): a binding there still admits them.
    previous_namespace: Option<String>,
    audiences: Vec<String>,
    verdicts: RwLock<VerdictCache>,
    in_flight: Semaphore,
    per_source: Arc<SourceShares>,
}

/// What a TokenReview said of a user besides the name: what RBAC reviews of
/// its tool grants need, and the claims a tool may be handed (`uid`, `groups`).
pub fn identity_of(user: &UserInfo) -> Identity {
    let groups = user.groups.clone().unwrap_or_default();
    let mut claims = serde_json::Map::new();
    if let Some(uid) = &user.uid {
        claims.insert("uid".into(), uid.clone().into());
    }
    claims.insert("groups".into(), groups.clone().into());
    Identity { uid: user.uid.clone(), groups, extra: user.extra.clone().unwrap_or_default(), claims }
}

/// Whether a TokenReview's answer holds for one of `wanted`: the API server
/// answers the audiences it found the token valid for, and an empty list
/// means "for the API server itself", which is exactly what must not pass.
pub fn audience_matches(wanted: &[String], answered: &[String]) -> bool {
    answered.iter().any(|audience| wanted.contains(audience))
}

impl KubernetesReviews {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        previous_namespace: Option<&str>,
        audiences: Vec<String>,
        admitted_ttl: Duration,
    ) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            previous_namespace: previous_namespace.filter(|p| *p != namespace).map(str::to_string),
            audiences,
            verdicts: RwLock::new(VerdictCache::new(admitted_ttl)),
            in_flight: Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
            per_source: SourceShares::new(MAX_REVIEWS_PER_SOURCE),
        }
    }

    fn remembered(&self, key: &[u8; 32]) -> Option<Result<Caller, Refusal>> {
        let verdict = self.verdicts.read().unwrap_or_else(|p| p.into_inner()).get(key)?;
        Some(verdict.map_err(|refusal| match refusal {
            RememberedRefusal::InvalidToken => Refusal::InvalidToken,
            RememberedRefusal::Forbidden => self.forbidden(),
            RememberedRefusal::WorkloadIdentity => self.workload_identity(),
        }))
    }

    fn verdicts(&self) -> std::sync::RwLockWriteGuard<'_, VerdictCache> {
        self.verdicts.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The caller `token` names, from the cache or by review; `source` is
    /// where the request came from (its budget of reviews in flight).
    pub async fn caller(&self, token: &str, source: Option<Source>) -> Result<Caller, Refusal> {
        let key = digest(token);
        if let Some(verdict) = self.remembered(&key) {
            return verdict;
        }
        let _share = match source {
            Some(Source(address)) => Some(self.per_source.take(address).ok_or(Refusal::Busy)?),
            None => None,
        };
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(Refusal::Busy);
        };
        let user = match self.review_token(token).await {
            Err(Refusal::InvalidToken) => {
                self.verdicts().refuse(key, RememberedRefusal::InvalidToken);
                return Err(Refusal::InvalidToken);
            }
            other => other?,
        };
        if runs_where_work_runs(user.username.as_deref().unwrap_or_default(), &self.namespace) {
            self.verdicts().refuse(key, RememberedRefusal::WorkloadIdentity);
            return Err(self.workload_identity());
        }
        if !self.may_use_tools(&user).await? {
            self.verdicts().refuse(key, RememberedRefusal::Forbidden);
            return Err(self.forbidden());
        }
        let caller = Caller::new(user.username.clone().unwrap_or_default()).with_identity(identity_of(&user));
        self.verdicts().admit(key, caller.clone());
        Ok(caller)
    }

    /// The refusal of an identity without the permission; it names the
    /// permission, never the identity.
    fn forbidden(&self) -> Refusal {
        Refusal::Forbidden(format!(
            "this identity may not use the MCP tools in namespace {} (RBAC: verb {:?} on {}/{} in {})",
            self.namespace,
            mcp_permission::VERB,
            mcp_permission::RESOURCE,
            mcp_permission::SUBRESOURCE,
            mining_api::GROUP,
        ))
    }

    /// The refusal of a ServiceAccount of the workflow namespace.
    fn workload_identity(&self) -> Refusal {
        Refusal::Forbidden(format!(
            "ServiceAccounts of namespace {} cannot be MCP callers: tool Pods run there and could act as \
             them. Make the caller's ServiceAccount in the callers' namespace (the chart's \
             callerNamespace) and bind it there",
            self.namespace
        ))
    }

    /// Creates a review object (cluster-scoped, never stored) within the API timeout.
    async fn submit<K>(&self, kind: &str, review: &K) -> Result<K, Refusal>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        let api: Api<K> = Api::all(self.client.clone());
        tokio::time::timeout(crate::kube_calls::API_TIMEOUT, api.create(&PostParams::default(), review))
            .await
            .map_err(|_| Refusal::Unavailable(format!("the {kind} timed out")))?
            .map_err(|e| Refusal::Unavailable(format!("{kind} failed: {e}")))
    }

    async fn review_token(&self, token: &str) -> Result<UserInfo, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), audiences: Some(self.audiences.clone()) },
            ..Default::default()
        };
        let answer = self.submit("TokenReview", &review).await?;
        let status = answer.status.unwrap_or_default();
        let audiences = status.audiences.unwrap_or_default();
        match (status.authenticated, status.user) {
            (Some(true), Some(user))
                if user.username.as_deref().is_some_and(|u| !u.is_empty())
                    && audience_matches(&self.audiences, &audiences) =>
            {
                Ok(user)
            }
            _ => Err(Refusal::InvalidToken),
        }
    }

    /// Whether RBAC grants `caller` the verb `call` on `mcptools/{tool}` in
    /// the workflow namespace (a restricted tool; see `mining_api::tool_caller`).
    /// Bounded like the token reviews: `Busy` when too many run at once.
    pub async fn may_call_tool(&self, caller: &Caller, tool: &str) -> Result<bool, Refusal> {
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(Refusal::Busy);
        };
        let identity = &caller.identity;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.name.clone()),
                groups: Some(identity.groups.clone()),
                uid: identity.uid.clone(),
                extra: Some(identity.extra.clone()).filter(|extra| !extra.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(mining_api::GROUP.into()),
                    resource: Some(tool_caller::TOOLS_RESOURCE.into()),
                    verb: Some(tool_caller::CALL_VERB.into()),
                    name: Some(tool.to_string()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = self.submit("SubjectAccessReview", &review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    /// The workflow namespace, where restricted tools are granted.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn may_use_tools(&self, user: &UserInfo) -> Result<bool, Refusal> {
        if self.may_use_tools_in(user, &self.namespace).await? {
            return Ok(true);
        }
        match &self.previous_namespace {
            Some(previous) => self.may_use_tools_in(user, previous).await,
            None => Ok(false),
        }
    }

    async fn may_use_tools_in(&self, user: &UserInfo, namespace: &str) -> Result<bool, Refusal> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                // A permission of its own, which grants no API access: being
                // allowed to use the tools must not mean being able to create,
                // edit or read workflows behind the frontend's back.
                resource_attributes: Some(ResourceAttributes {
                    group: Some(mining_api::GROUP.into()),
                    resource: Some(mcp_permission::RESOURCE.into()),
                    subresource: Some(mcp_permission::SUBRESOURCE.into()),
                    verb: Some(mcp_permission::VERB.into()),
                    namespace: Some(namespace.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = self.submit("SubjectAccessReview", &review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn accounts_of_the_workflow_namespace_are_told_apart() {
        assert!(runs_where_work_runs("system:serviceaccount:mining-workflows:mcp-user", "mining-workflows"));
        assert!(!runs_where_work_runs("system:serviceaccount:mining-callers:mcp-user", "mining-workflows"));
        assert!(!runs_where_work_runs("system:serviceaccount:mining-workflows-x:a", "mining-workflows"));
        assert!(
            !runs_where_work_runs("mining-workflows:alice", "mining-workflows"),
            "a user, not an account"
        );
        assert!(!runs_where_work_runs("system:serviceaccount:mining-workflows", "mining-workflows"));
    }

    #[test]
    fn a_flood_of_refused_tokens_never_evicts_an_admission() {
        let mut cache = VerdictCache::new(Duration::from_secs(60));
        cache.admit(digest("real"), Caller::new("alice"));
        for i in 0..(3 * REVIEW_CACHE_MAX) {
            cache.refuse(digest(&format!("random-{i}")), RememberedRefusal::InvalidToken);
        }
        assert_eq!(cache.get(&digest("real")), Some(Ok(Caller::new("alice"))));
        assert!(cache.refused.len() <= REVIEW_CACHE_MAX, "the refusals stay bounded");
        assert_eq!(cache.get(&digest("random-1")), None, "cleared when full");
        let last = digest(&format!("random-{}", 3 * REVIEW_CACHE_MAX - 1));
        assert_eq!(cache.get(&last), Some(Err(RememberedRefusal::InvalidToken)));
    }

    #[test]
    fn a_full_cache_of_live_admissions_keeps_them() {
        let mut cache = VerdictCache::new(Duration::from_secs(60));
        for i in 0..REVIEW_CACHE_MAX {
            cache.admit(digest(&format!("t-{i}")), Caller::new(format!("c{i}")));
        }
        cache.admit(digest("one-more"), Caller::new("late"));
        assert_eq!(cache.get(&digest("t-0")), Some(Ok(Caller::new("c0"))));
        assert_eq!(cache.get(&digest("one-more")), None, "reviewed again instead");
        // A token refused later (revoked) is no longer admitted.
        cache.refuse(digest("t-1"), RememberedRefusal::Forbidden);
        assert_eq!(cache.get(&digest("t-1")), Some(Err(RememberedRefusal::Forbidden)));
    }

    #[test]
    fn only_an_answer_for_one_of_our_audiences_admits() {
        let ours = strings(&["mining-operator"]);
        assert!(audience_matches(&ours, &strings(&["mining-operator"])));
        assert!(audience_matches(&ours, &strings(&["other", "mining-operator"])));
        // An empty answer: the token is one for the API server itself.
        assert!(!audience_matches(&ours, &[]));
        assert!(!audience_matches(&ours, &strings(&["https://kubernetes.default.svc"])));
    }
}

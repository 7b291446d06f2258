//! Who is calling: an axum middleware in front of `/mcp` that turns the
//! request's bearer token into a [`Caller`] (put into the request's
//! extensions, where the tools find it), or refuses with 401.
//!
//! - `none`: every request is the one anonymous caller.
//! - `tokens`: a file of `token caller-name` lines (a mounted Secret), re-read
//!   whenever it changes on disk.
//! - `kubernetes`: a `TokenReview` says who the token belongs to, and a
//!   `SubjectAccessReview` requires that identity to hold the MCP permission
//!   (verb `use` on `miningworkflows/mcp`, which grants no API access) in the
//!   namespace; answers are cached briefly.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use mining_api::mcp_permission;

use crate::ids::Caller;
use crate::metrics::{Metrics, ReasonLabels};

/// How long a Kubernetes verdict is trusted before it is asked again.
const REVIEW_CACHE_TTL: Duration = Duration::from_secs(60);
/// Bound on remembered verdicts; the cache starts over when it is full.
const REVIEW_CACHE_MAX: usize = 10_000;

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No usable `Authorization: Bearer` header.
    MissingToken,
    /// A token nobody issued.
    InvalidToken,
    /// A known identity without the RBAC permission to create workflows.
    Forbidden(String),
    /// The API server could not be asked.
    Unavailable(String),
}

impl Refusal {
    fn metric_reason(&self) -> &'static str {
        match self {
            Self::MissingToken => "missing_token",
            Self::InvalidToken => "invalid_token",
            Self::Forbidden(_) => "forbidden",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let challenge = |error: Option<&str>| {
            let value = match error {
                Some(error) => format!("Bearer realm=\"mining-operator\", error=\"{error}\""),
                None => "Bearer realm=\"mining-operator\"".to_string(),
            };
            [(header::WWW_AUTHENTICATE, value)]
        };
        match self {
            Self::MissingToken => (
                StatusCode::UNAUTHORIZED,
                challenge(None),
                "Unauthorized: send Authorization: Bearer <token>\n",
            )
                .into_response(),
            Self::InvalidToken => {
                (StatusCode::UNAUTHORIZED, challenge(Some("invalid_token")), "Unauthorized: invalid token\n")
                    .into_response()
            }
            Self::Forbidden(why) => (StatusCode::FORBIDDEN, format!("Forbidden: {why}\n")).into_response(),
            Self::Unavailable(why) => {
                (StatusCode::SERVICE_UNAVAILABLE, format!("Cannot check credentials now: {why}\n"))
                    .into_response()
            }
        }
    }
}

pub enum Authenticator {
    None,
    Tokens(TokenFile),
    Kubernetes(KubernetesReviews),
}

impl Authenticator {
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        match self {
            Self::None => Ok(Caller::anonymous()),
            Self::Tokens(file) => file.caller(bearer_token(headers)?),
            Self::Kubernetes(reviews) => reviews.caller(bearer_token(headers)?).await,
        }
    }
}

/// The shared state of the middleware.
pub struct AuthLayerState {
    pub authenticator: Authenticator,
    pub metrics: Arc<Metrics>,
}

/// The middleware: a caller in the request's extensions, or a refusal.
pub async fn require_caller(
    State(state): State<Arc<AuthLayerState>>,
    mut request: Request,
    next: Next,
) -> Response {
    match state.authenticator.authenticate(request.headers()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refusal) => {
            state
                .metrics
                .auth_failures
                .get_or_create(&ReasonLabels { reason: refusal.metric_reason() })
                .inc();
            tracing::info!(reason = refusal.metric_reason(), "request refused");
            refusal.into_response()
        }
    }
}

fn bearer_token(headers: &HeaderMap) -> Result<&str, Refusal> {
    let value = headers.get(header::AUTHORIZATION).ok_or(Refusal::MissingToken)?;
    let value = value.to_str().map_err(|_| Refusal::InvalidToken)?;
    let (scheme, token) = value.split_once(' ').ok_or(Refusal::MissingToken)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(Refusal::MissingToken);
    }
    Ok(token)
}

/// Tokens are kept and compared as digests: a lookup by digest leaks nothing
/// about a token's characters through timing.
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Parses `token caller-name` lines; `#` starts a comment.
pub fn parse_tokens(text: &str) -> Result<TokenTable, String> {
    let mut tokens = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(token), Some(name), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("line {}: expected `token caller-name`", number + 1));
        };
        if tokens.insert(digest(token), Caller::new(name)).is_some() {
            return Err(format!("line {}: a token appears twice", number + 1));
        }
    }
    Ok(tokens)
}

/// Callers by token digest.
type TokenTable = HashMap<[u8; 32], Caller>;
/// A file's modification time and size, to notice that it changed.
type FileStamp = (SystemTime, u64);

/// The tokens file, re-read when its modification time or size changes (a
/// mounted Secret is updated by swapping a symlink, which `metadata` follows).
pub struct TokenFile {
    path: PathBuf,
    loaded: RwLock<(Option<FileStamp>, TokenTable)>,
}

impl TokenFile {
    /// Loads the file once; a missing or malformed file is an error at start-up.
    pub fn open(path: PathBuf) -> Result<Self, String> {
        let file = Self { path, loaded: RwLock::new((None, HashMap::new())) };
        file.reload()?;
        Ok(file)
    }

    fn stamp(&self) -> Option<FileStamp> {
        let metadata = std::fs::metadata(&self.path).ok()?;
        Some((metadata.modified().ok()?, metadata.len()))
    }

    fn reload(&self) -> Result<usize, String> {
        let stamp = self.stamp();
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("reading {}: {e}", self.path.display()))?;
        let tokens = parse_tokens(&text).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let count = tokens.len();
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = (stamp, tokens);
        Ok(count)
    }

    fn caller(&self, token: &str) -> Result<Caller, Refusal> {
        let current = self.stamp();
        let stale = self.loaded.read().unwrap_or_else(|p| p.into_inner()).0 != current;
        if stale {
            // A half-written or broken file keeps the tokens we had.
            match self.reload() {
                Ok(count) => {
                    tracing::info!(tokens = count, path = %self.path.display(), "tokens file reloaded")
                }
                Err(err) => {
                    tracing::warn!(error = %err, "tokens file unreadable; keeping the previous tokens")
                }
            }
        }
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.1.get(&digest(token)).cloned().ok_or(Refusal::InvalidToken)
    }
}

/// Kubernetes TokenReview + SubjectAccessReview, with a short cache.
pub struct KubernetesReviews {
    client: kube::Client,
    namespace: String,
    verdicts: RwLock<HashMap<[u8; 32], (Caller, Instant)>>,
}

impl KubernetesReviews {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self { client, namespace: namespace.to_string(), verdicts: RwLock::new(HashMap::new()) }
    }

    async fn caller(&self, token: &str) -> Result<Caller, Refusal> {
        let key = digest(token);
        if let Some((caller, at)) = self.verdicts.read().unwrap_or_else(|p| p.into_inner()).get(&key)
            && at.elapsed() < REVIEW_CACHE_TTL
        {
            return Ok(caller.clone());
        }
        let user = self.review_token(token).await?;
        self.check_access(&user).await?;
        let caller = Caller::new(user.username.clone().unwrap_or_default());
        let mut verdicts = self.verdicts.write().unwrap_or_else(|p| p.into_inner());
        if verdicts.len() >= REVIEW_CACHE_MAX {
            verdicts.clear();
        }
        verdicts.insert(key, (caller.clone(), Instant::now()));
        Ok(caller)
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
        tokio::time::timeout(crate::workflows::API_TIMEOUT, api.create(&PostParams::default(), review))
            .await
            .map_err(|_| Refusal::Unavailable(format!("the {kind} timed out")))?
            .map_err(|e| Refusal::Unavailable(format!("{kind} failed: {e}")))
    }

    async fn review_token(
        &self,
        token: &str,
    ) -> Result<k8s_openapi::api::authentication::v1::UserInfo, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
            ..Default::default()
        };
        let answer = self.submit("TokenReview", &review).await?;
        let status = answer.status.unwrap_or_default();
        match (status.authenticated, status.user) {
            (Some(true), Some(user)) if user.username.as_deref().is_some_and(|u| !u.is_empty()) => Ok(user),
            _ => Err(Refusal::InvalidToken),
        }
    }

    async fn check_access(
        &self,
        user: &k8s_openapi::api::authentication::v1::UserInfo,
    ) -> Result<(), Refusal> {
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
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = self.submit("SubjectAccessReview", &review).await?;
        if answer.status.is_some_and(|s| s.allowed) {
            Ok(())
        } else {
            Err(Refusal::Forbidden(format!(
                "this identity may not use the MCP tools in namespace {} (RBAC: verb {:?} on {}/{} in {})",
                self.namespace,
                mcp_permission::VERB,
                mcp_permission::RESOURCE,
                mcp_permission::SUBRESOURCE,
                mining_api::GROUP,
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, authorization.parse().unwrap());
        headers
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Ok("abc"));
        assert_eq!(bearer_token(&headers("bearer  abc ")), Ok("abc"));
        assert_eq!(bearer_token(&HeaderMap::new()), Err(Refusal::MissingToken));
        assert_eq!(bearer_token(&headers("Basic abc")), Err(Refusal::MissingToken));
        assert_eq!(bearer_token(&headers("Bearer ")), Err(Refusal::MissingToken));
    }

    #[test]
    fn token_lines_map_tokens_to_callers() {
        let tokens = parse_tokens("# agents\nt-alice alice\n\n  t-bob   bob  \n").unwrap();
        assert_eq!(tokens[&digest("t-alice")], Caller::new("alice"));
        assert_eq!(tokens[&digest("t-bob")], Caller::new("bob"));
        assert_eq!(tokens.len(), 2);
        assert!(parse_tokens("lonely\n").unwrap_err().contains("line 1"));
        assert!(parse_tokens("a x\na y\n").unwrap_err().contains("twice"));
        assert!(parse_tokens("a b c\n").is_err());
    }

    #[test]
    fn a_changed_tokens_file_is_picked_up_and_a_broken_one_keeps_the_old_tokens() {
        let dir = std::env::temp_dir().join(format!("mcp-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, "one alice\n").unwrap();
        let file = TokenFile::open(path.clone()).unwrap();
        assert_eq!(file.caller("one"), Ok(Caller::new("alice")));
        assert_eq!(file.caller("two"), Err(Refusal::InvalidToken));
        std::fs::write(&path, "two bob\nthree carol\n").unwrap();
        assert_eq!(file.caller("two"), Ok(Caller::new("bob")));
        assert_eq!(file.caller("one"), Err(Refusal::InvalidToken));
        std::fs::write(&path, "broken\n").unwrap();
        assert_eq!(file.caller("three"), Ok(Caller::new("carol")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn refusals_are_401_with_a_bearer_challenge() {
        let response = Refusal::MissingToken.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().starts_with("Bearer"));
        let response = Refusal::InvalidToken.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Refusal::Forbidden("x".into()).into_response().status(), StatusCode::FORBIDDEN);
    }
}

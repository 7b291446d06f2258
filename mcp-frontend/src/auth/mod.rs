//! Who is calling: an axum middleware in front of `/mcp` that turns the
//! request's bearer token into a [`Caller`] (put into the request's
//! extensions, where the tools find it), or refuses with 401.
//!
//! - `none`: every request is the one anonymous caller.
//! - `tokens`: a file of `token caller-name` lines ([`tokens`]).
//! - `kubernetes`: TokenReview for the frontend's audiences and RBAC ([`kubernetes`]).
//! - `oidc`: JWT access tokens of an OpenID issuer, checked here ([`oidc`]),
//!   with Protected Resource Metadata for MCP hosts' sign-in ([`metadata`]).
//!
//! Refusals never name the caller or echo the token.

pub mod fetch;
pub mod jwks;
pub mod kubernetes;
pub mod metadata;
pub mod oidc;
pub mod proxied;
pub mod tokens;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::ids::Caller;
use crate::metrics::{Metrics, ReasonLabels};
use crate::serve::Source;

pub use kubernetes::KubernetesReviews;
pub use metadata::ProtectedResource;
pub use oidc::OidcVerifier;
pub use tokens::TokenFile;

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No usable `Authorization: Bearer` header.
    MissingToken,
    /// A token nobody issued.
    InvalidToken,
    /// A token that is not valid here, and why (expired, for another
    /// audience, …): fixed text, never the token's content.
    TokenRejected(String),
    /// A valid token without every required scope.
    InsufficientScope,
    /// A known identity without the RBAC permission to create workflows.
    Forbidden(String),
    /// The API server could not be asked.
    Unavailable(String),
    /// Too many credentials are being checked at once; retry in a second.
    Busy,
}

impl Refusal {
    fn metric_reason(&self) -> &'static str {
        match self {
            Self::MissingToken => "missing_token",
            Self::InvalidToken | Self::TokenRejected(_) => "invalid_token",
            Self::InsufficientScope => "insufficient_scope",
            Self::Forbidden(_) => "forbidden",
            Self::Unavailable(_) => "unavailable",
            Self::Busy => "busy",
        }
    }
}

/// What a challenge adds in `--auth oidc`: where the metadata is and which
/// scopes a token needs (empty in the other modes).
#[derive(Debug, Default)]
pub struct ChallengeContext {
    pub resource_metadata: Option<String>,
    pub scopes: Vec<String>,
}

impl Refusal {
    /// The HTTP answer: 401 with a Bearer challenge for a missing or bad
    /// token (RFC 6750 §3.1: no error code when there was no token), 403
    /// `insufficient_scope` for missing scopes, 503 with Retry-After when
    /// the check itself could not run.
    pub fn respond(self, context: &ChallengeContext) -> Response {
        let challenge = |error: Option<(&str, &str)>| {
            let value =
                metadata::bearer_challenge(error, &context.scopes, context.resource_metadata.as_deref());
            [(header::WWW_AUTHENTICATE, value)]
        };
        match self {
            Self::MissingToken => (
                StatusCode::UNAUTHORIZED,
                challenge(None),
                "Unauthorized: send Authorization: Bearer <token>\n",
            )
                .into_response(),
            Self::InvalidToken => (
                StatusCode::UNAUTHORIZED,
                challenge(Some(("invalid_token", "the token is not valid here"))),
                "Unauthorized: invalid token\n",
            )
                .into_response(),
            Self::TokenRejected(why) => (
                StatusCode::UNAUTHORIZED,
                challenge(Some(("invalid_token", &why))),
                format!("Unauthorized: invalid token: {why}\n"),
            )
                .into_response(),
            Self::InsufficientScope => (
                StatusCode::FORBIDDEN,
                challenge(Some(("insufficient_scope", "the token lacks a required scope"))),
                format!("Forbidden: the token needs the scopes `{}`\n", context.scopes.join(" ")),
            )
                .into_response(),
            Self::Forbidden(why) => (StatusCode::FORBIDDEN, format!("Forbidden: {why}\n")).into_response(),
            Self::Unavailable(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "5")],
                format!("Cannot check credentials now: {why}; retry in 5 seconds\n"),
            )
                .into_response(),
            Self::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!(
                    "Too many credentials are being checked at once (the limit is {}); retry in 1 second\n",
                    kubernetes::MAX_REVIEWS_IN_FLIGHT
                ),
            )
                .into_response(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        self.respond(&ChallengeContext::default())
    }
}

pub enum Authenticator {
    None,
    Tokens(TokenFile),
    Kubernetes(Arc<KubernetesReviews>),
    Oidc(Box<OidcVerifier>),
}

impl Authenticator {
    pub async fn authenticate(&self, headers: &HeaderMap, source: Option<Source>) -> Result<Caller, Refusal> {
        match self {
            Self::None => Ok(Caller::anonymous()),
            Self::Tokens(file) => file.caller(bearer_token(headers)?),
            Self::Kubernetes(reviews) => reviews.caller(bearer_token(headers)?, source).await,
            Self::Oidc(verifier) => verifier.caller(bearer_token(headers)?).await,
        }
    }
}

/// The shared state of the middleware.
pub struct AuthLayerState {
    pub authenticator: Authenticator,
    /// The protected resource's metadata, in `--auth oidc`.
    pub resource: Option<Arc<ProtectedResource>>,
    pub metrics: Arc<Metrics>,
}

impl AuthLayerState {
    fn challenge_context(&self, headers: &HeaderMap) -> ChallengeContext {
        match &self.resource {
            Some(resource) => ChallengeContext {
                resource_metadata: Some(resource.metadata_url(headers)),
                scopes: resource.scopes.clone(),
            },
            None => ChallengeContext::default(),
        }
    }
}

/// The middleware: a caller in the request's extensions, or a refusal.
pub async fn require_caller(
    State(state): State<Arc<AuthLayerState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let source = request.extensions().get::<Source>().copied();
    match state.authenticator.authenticate(request.headers(), source).await {
        Ok(caller) => {
            // The connection carried an authenticated request: it keeps its place.
            if let Some(connection) = request.extensions().get::<crate::connections::ConnectionHandle>() {
                connection.prove(&caller.digest);
            }
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
            close_after(refusal.respond(&state.challenge_context(request.headers())))
        }
    }
}

/// A 401 or 403 ends its connection: a client without a usable credential
/// must not hold a keep-alive connection (and its place in the pool) by
/// asking again and again.
pub fn close_after(mut response: Response) -> Response {
    if matches!(response.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    response
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

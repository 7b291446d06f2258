//! `--auth oidc`: the frontend as an OAuth 2.1 resource server. Callers send
//! JWT access tokens from an OpenID issuer (Entra, Okta, Keycloak, Dex,
//! Google, or the Kubernetes API server); each is checked here, with no call
//! to the issuer but the cached key set ([`super::jwks`]):
//!
//! - the signature, with a key the issuer publishes, by an allowed
//!   asymmetric algorithm (`none` and HMAC are never accepted: an HMAC key
//!   would be a secret shared with every other resource server);
//! - `iss` exactly the issuer, `aud` one of the configured audiences (RFC
//!   8707: a token for another server is refused, so tokens cannot be
//!   replayed across servers), `exp` and `nbf` within the clock skew;
//! - the required scopes (from `scope` or `scp`), else 403
//!   `insufficient_scope` so hosts can ask for more;
//! - that it is an access token, not an ID token meant for a client whose id
//!   happens to be the audience: never a `typ` other than `at+jwt` or `JWT`,
//!   nor a claim only ID tokens carry (`nonce`, `at_hash`, `c_hash`,
//!   Keycloak's `typ: ID`); with [`TokenType::AtJwt`], RFC 9068's `at+jwt`
//!   header is required;
//! - with `email` as the caller claim, `email_verified: true` (an address
//!   anyone could type into a sign-up form names nobody).
//!
//! The caller is the issuer and the configured claim (`sub` by default)
//! together, so two issuers' subjects never meet.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, AlgorithmFamily, Validation};
use serde_json::{Map, Value};

use super::Refusal;
use super::jwks::{KeyCache, Lookup};
use crate::ids::Caller;

/// Longest caller claim accepted (it names the caller in logs).
pub const MAX_CALLER_CLAIM_BYTES: usize = 512;

/// What a token must satisfy.
#[derive(Debug, Clone)]
pub struct TokenPolicy {
    pub issuer: String,
    pub audiences: Vec<String>,
    pub required_scopes: Vec<String>,
    pub caller_claim: String,
    pub algorithms: Vec<Algorithm>,
    pub clock_skew_seconds: u64,
    pub token_type: TokenType,
}

/// Which JWTs are taken as access tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TokenType {
    /// RFC 9068 access tokens (`typ: at+jwt`) and untyped JWTs that carry
    /// no ID-token claim: what Entra, Okta, Auth0 and Kubernetes issue.
    Access,
    /// Only RFC 9068 access tokens (`typ: at+jwt`): for IdPs that type them
    /// (Keycloak 22+, Duende, Authlete, ...).
    AtJwt,
}

/// Claims OpenID Connect defines for ID tokens only.
const ID_TOKEN_CLAIMS: [&str; 3] = ["nonce", "at_hash", "c_hash"];

/// Why the token is not an access token of `token_type` (`None`: it is).
pub fn not_an_access_token(
    token_type: TokenType,
    header_typ: Option<&str>,
    claims: &Map<String, Value>,
) -> Option<&'static str> {
    let typ = header_typ.map(|t| t.to_ascii_lowercase());
    let typed_access = matches!(typ.as_deref(), Some("at+jwt" | "application/at+jwt"));
    match (token_type, typ.as_deref()) {
        (TokenType::AtJwt, _) if !typed_access => {
            return Some("the token is not an RFC 9068 access token (typ at+jwt)");
        }
        (TokenType::Access, Some(other)) if !typed_access && other != "jwt" => {
            return Some("the token's typ is not that of an access token");
        }
        _ => {}
    }
    let keycloak_id = claims.get("typ").and_then(Value::as_str).is_some_and(|t| t.eq_ignore_ascii_case("id"));
    (keycloak_id || ID_TOKEN_CLAIMS.iter().any(|claim| claims.contains_key(*claim)))
        .then_some("the token is an ID token; send an access token")
}

/// Parses an allowed algorithm: asymmetric ones only.
pub fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    let algorithm: Algorithm = text.parse().map_err(|_| format!("`{text}` is not a JWS algorithm"))?;
    if algorithm.family() == AlgorithmFamily::Hmac {
        return Err(format!(
            "`{text}` is an HMAC algorithm: a resource server never shares the issuer's secret"
        ));
    }
    Ok(algorithm)
}

/// The checker of one issuer's tokens.
pub struct OidcVerifier {
    pub policy: TokenPolicy,
    keys: KeyCache,
}

impl OidcVerifier {
    pub fn new(policy: TokenPolicy, keys: KeyCache) -> Self {
        Self { policy, keys }
    }

    /// Fetches the keys ahead of the first request (failures are logged and
    /// retried when a token arrives).
    pub async fn prefetch(&self) {
        let _ = self.keys.refresh().await;
    }

    pub async fn caller(&self, token: &str) -> Result<Caller, Refusal> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Refusal::TokenRejected("the token is not a signed JWT".into()))?;
        if !self.policy.algorithms.contains(&header.alg) {
            return Err(Refusal::TokenRejected(format!("algorithm {:?} is not accepted", header.alg)));
        }
        let key = match self.keys.lookup(header.kid.as_deref()).await {
            Lookup::Found(key) => key,
            Lookup::Unknown => {
                return Err(Refusal::TokenRejected(
                    "the token is signed by a key the issuer does not publish".into(),
                ));
            }
            Lookup::Unavailable(why) => return Err(Refusal::Unavailable(why)),
        };
        if key.algorithm.is_some_and(|published| published != header.alg) {
            return Err(Refusal::TokenRejected("the token's algorithm is not its key's".into()));
        }
        let claims =
            jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &self.validation(header.alg))
                .map_err(|e| Refusal::TokenRejected(describe(e.kind()).into()))?
                .claims;
        if let Some(why) = not_an_access_token(self.policy.token_type, header.typ.as_deref(), &claims) {
            return Err(Refusal::TokenRejected(why.into()));
        }
        caller_of(&self.policy, &claims)
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[&self.policy.issuer]);
        validation.set_audience(&self.policy.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = self.policy.clock_skew_seconds;
        validation
    }
}

/// What a failed validation tells the client (RFC 6750 `error_description`:
/// fixed text, never anything of the token's).
fn describe(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired",
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)",
        ErrorKind::InvalidIssuer => "the token is from another issuer",
        ErrorKind::InvalidAudience => "the token was not issued for this server (aud)",
        ErrorKind::InvalidSignature => "the token's signature does not verify",
        ErrorKind::InvalidAlgorithm => "the token's algorithm is not its key's",
        ErrorKind::MissingRequiredClaim(claim) if claim == "exp" => "the token has no exp claim",
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => "the token has no aud claim",
        ErrorKind::MissingRequiredClaim(_) => "the token has no iss claim",
        _ => "the token is malformed",
    }
}

/// The scopes a token grants: `scope` (RFC 9068, a space-separated string)
/// or `scp` (Entra and Okta: a string or an array).
pub fn granted_scopes(claims: &Map<String, Value>) -> Vec<&str> {
    let mut scopes = Vec::new();
    for claim in ["scope", "scp"] {
        match claims.get(claim) {
            Some(Value::String(text)) => scopes.extend(text.split_ascii_whitespace()),
            Some(Value::Array(items)) => scopes.extend(items.iter().filter_map(Value::as_str)),
            _ => {}
        }
    }
    scopes
}

/// The caller of verified claims, or why there is none.
pub fn caller_of(policy: &TokenPolicy, claims: &Map<String, Value>) -> Result<Caller, Refusal> {
    let granted = granted_scopes(claims);
    if policy.required_scopes.iter().any(|scope| !granted.contains(&scope.as_str())) {
        return Err(Refusal::InsufficientScope);
    }
    let name = match claims.get(&policy.caller_claim) {
        Some(Value::String(name)) if !name.is_empty() && name.len() <= MAX_CALLER_CLAIM_BYTES => name,
        Some(Value::String(name)) if !name.is_empty() => {
            return Err(Refusal::TokenRejected("the token's caller claim is too long".into()));
        }
        _ => return Err(Refusal::TokenRejected("the token has no caller claim (a non-empty string)".into())),
    };
    // OpenID Connect: `email` is whatever the user typed unless the IdP
    // says it verified it (a string "true" too: some IdPs send one).
    let verified = |claim: &str| {
        matches!(claims.get(claim), Some(Value::Bool(true)))
            || claims.get(claim).and_then(Value::as_str) == Some("true")
    };
    if policy.caller_claim == "email" && !verified("email_verified") {
        return Err(Refusal::TokenRejected("the token's email is not verified (email_verified)".into()));
    }
    // The issuer first, and a separator no URL ends with: two issuers'
    // identical subjects are two callers.
    // Groups, for restricted tools' grants; every claim, for the tools that
    // ask to be told some (`callerIdentity.claims`).
    let groups = match claims.get("groups") {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    };
    let identity = crate::ids::Identity { groups, claims: claims.clone(), ..Default::default() };
    Ok(Caller::new(format!("{}#{name}", policy.issuer)).with_identity(identity))
}

#[cfg(test)]
#[path = "oidc_tests.rs"]
mod tests;

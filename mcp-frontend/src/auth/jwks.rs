//! The issuer's signing keys, fetched and cached: from the issuer's OpenID
//! discovery document (`jwks_uri`), or, for the Kubernetes API server as
//! issuer, through the frontend's own Kubernetes client (`/openid/v1/jwks`,
//! which needs no address or CA of its own).
//!
//! Keys are re-fetched when a token names a key not in the set (the issuer
//! rotated), at most once per [`MIN_REFRESH_INTERVAL`] so a stream of tokens
//! with made-up `kid`s cannot make the frontend hammer the issuer, and when
//! the set is older than [`MAX_KEY_AGE`] (so a removed key stops verifying).
//! One fetch runs at a time; requests that need it wait for that one.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::fetch::{JsonFetcher, check_url};

/// Shortest time between two fetches of the key set: an issuer that rotated
/// is believed within this, and made-up `kid`s cost the issuer at most one
/// fetch per interval.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// The same while no key set was ever fetched (the issuer was not reachable
/// when the frontend started): every request fails until one is.
pub const MIN_RETRY_INTERVAL_WITHOUT_KEYS: Duration = Duration::from_secs(1);
/// Oldest a key set may be before it is fetched again.
pub const MAX_KEY_AGE: Duration = Duration::from_secs(10 * 60);
/// Most keys kept from one set (real issuers publish two to five).
pub const MAX_KEYS: usize = 64;

/// Where the keys come from.
pub enum KeySource {
    /// `{issuer}/.well-known/openid-configuration`, then its `jwks_uri`.
    Discovery { issuer: String, fetcher: Box<JsonFetcher> },
    /// `GET /openid/v1/jwks` of the API server the frontend talks to.
    Kubernetes { client: kube::Client },
    /// Nothing to fetch from (unit tests).
    #[cfg(test)]
    Unreachable,
}

#[derive(Deserialize)]
struct DiscoveryDocument {
    issuer: String,
    jwks_uri: String,
}

#[derive(Deserialize)]
struct RawKeySet {
    keys: Vec<serde_json::Value>,
}

impl KeySource {
    async fn fetch(&self) -> Result<RawKeySet, String> {
        match self {
            Self::Discovery { issuer, fetcher } => {
                let url = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
                let discovery: DiscoveryDocument = fetcher.get_json(&url).await?;
                // OpenID Connect Discovery §4.3: the document must name the
                // issuer it was fetched for, exactly.
                if discovery.issuer != *issuer {
                    return Err(format!(
                        "{url} names issuer `{}`, not the configured `{issuer}`",
                        discovery.issuer
                    ));
                }
                check_url(&discovery.jwks_uri).map_err(|e| format!("jwks_uri of {url}: {e}"))?;
                fetcher.get_json(&discovery.jwks_uri).await
            }
            Self::Kubernetes { client } => {
                let request = http::Request::get("/openid/v1/jwks")
                    .body(Vec::new())
                    .map_err(|e| format!("GET /openid/v1/jwks: {e}"))?;
                let text = tokio::time::timeout(super::fetch::FETCH_TIMEOUT, client.request_text(request))
                    .await
                    .map_err(|_| "GET /openid/v1/jwks of the Kubernetes API: no answer in time".to_string())?
                    .map_err(|e| format!("GET /openid/v1/jwks of the Kubernetes API: {e}"))?;
                serde_json::from_str(&text)
                    .map_err(|e| format!("the Kubernetes API's key set is not JSON: {e}"))
            }
            #[cfg(test)]
            Self::Unreachable => Err("no key source".into()),
        }
    }
}

/// One verification key.
#[derive(Clone)]
pub struct VerificationKey {
    pub key: DecodingKey,
    /// The algorithm the key is published for, if it says.
    pub algorithm: Option<Algorithm>,
}

/// Keys by `kid`; keys without one are kept under the empty name.
pub type KeySet = HashMap<String, VerificationKey>;

/// The usable signing keys of a JWKS document: public keys of the RSA, EC
/// and OKP types, not marked for encryption; symmetric (`oct`) keys and keys
/// this crate cannot read are skipped, so one odd key does not lose the rest.
pub fn parse_key_set(raw: &[serde_json::Value]) -> KeySet {
    let mut keys = KeySet::new();
    for value in raw {
        if keys.len() >= MAX_KEYS {
            break;
        }
        let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else { continue };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_))
            || jwk.common.public_key_use == Some(PublicKeyUse::Encryption)
        {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(&jwk) else { continue };
        let algorithm = jwk.common.key_algorithm.and_then(|alg| alg.to_string().parse().ok());
        keys.insert(jwk.common.key_id.clone().unwrap_or_default(), VerificationKey { key, algorithm });
    }
    keys
}

struct Loaded {
    keys: Arc<KeySet>,
    fetched_at: Instant,
}

/// The cached key set of one issuer.
pub struct KeyCache {
    source: KeySource,
    loaded: RwLock<Option<Loaded>>,
    /// Held during a fetch, so one runs at a time.
    fetching: tokio::sync::Mutex<FetchState>,
}

/// What a lookup found.
pub enum Lookup {
    Found(VerificationKey),
    /// The issuer does not publish this key (after a refresh, where allowed).
    Unknown,
    /// No key set could be fetched yet; says why.
    Unavailable(String),
}

impl KeyCache {
    pub fn new(source: KeySource) -> Self {
        Self { source, loaded: RwLock::new(None), fetching: tokio::sync::Mutex::new(FetchState::default()) }
    }

    /// A cache that already holds `keys` and never fetches (unit tests).
    #[cfg(test)]
    pub(crate) fn preloaded(keys: KeySet) -> Self {
        let cache = Self::new(KeySource::Unreachable);
        *cache.loaded.write().unwrap() = Some(Loaded { keys: Arc::new(keys), fetched_at: Instant::now() });
        cache
    }

    fn current(&self) -> Option<(Arc<KeySet>, Instant)> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.as_ref().map(|l| (l.keys.clone(), l.fetched_at))
    }

    /// The key named `kid` (`None`: the token names none, so the set's only
    /// key, if it has exactly one).
    pub async fn lookup(&self, kid: Option<&str>) -> Lookup {
        let find = |keys: &KeySet| match kid {
            Some(kid) => keys.get(kid).cloned(),
            None if keys.len() == 1 => keys.values().next().cloned(),
            None => None,
        };
        let mut error = None;
        if let Some((keys, fetched_at)) = self.current() {
            let found = find(&keys);
            if found.is_some() && fetched_at.elapsed() < MAX_KEY_AGE {
                return found.map_or(Lookup::Unknown, Lookup::Found);
            }
        }
        if let Err(why) = self.refresh().await {
            error = Some(why);
        }
        match (self.current(), error) {
            (Some((keys, _)), _) => find(&keys).map_or(Lookup::Unknown, Lookup::Found),
            (None, Some(why)) => Lookup::Unavailable(why),
            (None, None) => Lookup::Unavailable("the issuer's keys have not been fetched yet".into()),
        }
    }

    /// Fetches the set unless one was fetched (or tried) within
    /// [`MIN_REFRESH_INTERVAL`]; concurrent callers share one fetch. Within
    /// the interval the last attempt's outcome is the answer.
    pub async fn refresh(&self) -> Result<(), String> {
        let mut state = self.fetching.lock().await;
        let interval =
            if self.current().is_some() { MIN_REFRESH_INTERVAL } else { MIN_RETRY_INTERVAL_WITHOUT_KEYS };
        if state.last_attempt.is_some_and(|at| at.elapsed() < interval) {
            return state.last_error.clone().map_or(Ok(()), Err);
        }
        state.last_attempt = Some(Instant::now());
        let outcome = match self.source.fetch().await {
            Ok(raw) => {
                let keys = parse_key_set(&raw.keys);
                if keys.is_empty() {
                    Err("the issuer's key set holds no usable signing key".to_string())
                } else {
                    tracing::info!(keys = keys.len(), "fetched the issuer's signing keys");
                    *self.loaded.write().unwrap_or_else(|p| p.into_inner()) =
                        Some(Loaded { keys: Arc::new(keys), fetched_at: Instant::now() });
                    Ok(())
                }
            }
            Err(why) => Err(why),
        };
        if let Err(why) = &outcome {
            tracing::warn!(error = %why, "fetching the issuer's signing keys failed");
        }
        state.last_error = outcome.clone().err();
        outcome
    }
}

/// When the key set was last fetched, and how that went.
#[derive(Default)]
struct FetchState {
    last_attempt: Option<Instant>,
    last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_public_signing_keys_are_kept() {
        let raw = [
            json!({"kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"}),
            json!({"kty": "oct", "kid": "h1", "k": "c2VjcmV0"}),
            json!({"kty": "RSA", "kid": "enc", "use": "enc", "n": "sXch", "e": "AQAB"}),
            json!({"kty": "weird", "kid": "w"}),
            json!({"kty": "EC", "kid": "e1", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}),
        ];
        let keys = parse_key_set(&raw);
        let mut kids: Vec<_> = keys.keys().cloned().collect();
        kids.sort();
        assert_eq!(kids, ["e1", "r1"]);
        assert_eq!(keys["r1"].algorithm, Some(Algorithm::RS256));
        assert_eq!(keys["e1"].algorithm, None);
    }

    /// An issuer on loopback that counts the requests it answers.
    async fn counting_issuer() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let (count, base) = (requests.clone(), issuer.clone());
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut head = vec![0u8; 4096];
                let read = stream.read(&mut head).await.unwrap_or(0);
                count.fetch_add(1, Ordering::SeqCst);
                let head = String::from_utf8_lossy(&head[..read]);
                let body = if head.starts_with("GET /.well-known/openid-configuration") {
                    json!({"issuer": base, "jwks_uri": format!("{base}/jwks")})
                } else {
                    json!({"keys": [{"kty": "EC", "kid": "k1", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]})
                }
                .to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        (issuer, requests)
    }

    #[tokio::test]
    async fn made_up_kids_cannot_make_the_frontend_hammer_the_issuer() {
        let (issuer, requests) = counting_issuer().await;
        let fetcher = JsonFetcher::new(None).unwrap();
        let cache = KeyCache::new(KeySource::Discovery { issuer, fetcher: Box::new(fetcher) });
        assert!(matches!(cache.lookup(Some("k1")).await, Lookup::Found(_)));
        let after_first = requests.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(after_first, 2, "discovery and the key set");
        // A flood of tokens naming keys the issuer never published, at once
        // and one after another: no fetch within the interval.
        let lookups = (0..200).map(|i| {
            let cache = &cache;
            async move { cache.lookup(Some(&format!("made-up-{i}"))).await }
        });
        for lookup in futures::future::join_all(lookups).await {
            assert!(matches!(lookup, Lookup::Unknown));
        }
        assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), after_first);
        // The published key still verifies meanwhile.
        assert!(matches!(cache.lookup(Some("k1")).await, Lookup::Found(_)));
    }

    #[tokio::test]
    async fn an_unreachable_issuer_is_unavailable_not_invalid() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let cache = KeyCache::new(KeySource::Discovery {
            issuer,
            fetcher: Box::new(JsonFetcher::new(None).unwrap()),
        });
        assert!(matches!(cache.lookup(Some("k1")).await, Lookup::Unavailable(_)));
        // Within the retry interval the last error is told again, without a fetch.
        assert!(matches!(cache.lookup(None).await, Lookup::Unavailable(why) if why.contains("GET")));
    }

    #[test]
    fn a_huge_key_set_is_cut_at_the_bound() {
        let raw: Vec<_> = (0..1000)
            .map(|i| json!({"kty": "EC", "kid": format!("k{i}"), "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}))
            .collect();
        assert_eq!(parse_key_set(&raw).len(), MAX_KEYS);
    }
}

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{DecodingKey, EncodingKey, Header, encode};
use serde_json::json;

use super::*;
use crate::auth::jwks::{KeySet, VerificationKey};

const ISSUER: &str = "https://idp.example.com/realms/a";
const AUDIENCE: &str = "https://mcp.example.com/mcp";

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn policy() -> TokenPolicy {
    TokenPolicy {
        issuer: ISSUER.into(),
        audiences: vec![AUDIENCE.into()],
        required_scopes: vec![],
        caller_claim: "sub".into(),
        algorithms: vec![Algorithm::RS256, Algorithm::ES256],
        clock_skew_seconds: 30,
        token_type: TokenType::Access,
    }
}

fn verifier_for(policy: TokenPolicy) -> OidcVerifier {
    let mut keys = KeySet::new();
    let rsa = DecodingKey::from_rsa_pem(include_bytes!("testdata/rsa.pub.pem")).unwrap();
    keys.insert("rsa".into(), VerificationKey { key: rsa, algorithm: Some(Algorithm::RS256) });
    let ec = DecodingKey::from_ec_pem(include_bytes!("testdata/ec.pub.pem")).unwrap();
    keys.insert("ec".into(), VerificationKey { key: ec, algorithm: None });
    OidcVerifier::new(policy, KeyCache::preloaded(keys))
}

fn claims() -> serde_json::Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now() + 300, "iat": now(), "scope": "openid mining"})
}

fn rsa_token(kid: &str, claims: &serde_json::Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.into());
    encode(&header, claims, &EncodingKey::from_rsa_pem(include_bytes!("testdata/rsa.pem")).unwrap()).unwrap()
}

fn rejected(result: Result<Caller, Refusal>) -> String {
    match result {
        Err(Refusal::TokenRejected(why)) => why,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn a_valid_token_names_the_issuer_and_subject() {
    let verifier = verifier_for(policy());
    let caller = verifier.caller(&rsa_token("rsa", &claims())).await.unwrap();
    assert_eq!(caller, Caller::new(format!("{ISSUER}#alice")));
    // Its claims are kept for the tools that ask to be told some.
    assert_eq!(caller.identity.claims["sub"], "alice");
    let mut grouped = claims();
    grouped["groups"] = json!(["ops", 7, "dev"]);
    let caller = verifier.caller(&rsa_token("rsa", &grouped)).await.unwrap();
    assert_eq!(caller.identity.groups, ["ops", "dev"], "string groups, for restricted tools' grants");
    // The same subject from another issuer is another caller.
    assert_ne!(caller, Caller::new("https://other.example.com#alice"));
    // ES256 with the EC key, `aud` as an array, another caller claim.
    let mut policy = policy();
    policy.caller_claim = "email".into();
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("ec".into());
    let mut body = claims();
    body["aud"] = json!(["other", AUDIENCE]);
    body["email"] = json!("alice@example.com");
    body["email_verified"] = json!(true);
    let token = encode(&header, &body, &EncodingKey::from_ec_pem(include_bytes!("testdata/ec.pem")).unwrap())
        .unwrap();
    let caller = verifier_for(policy).caller(&token).await.unwrap();
    assert_eq!(caller.name, format!("{ISSUER}#alice@example.com"));
}

#[tokio::test]
async fn expired_foreign_and_misdirected_tokens_are_rejected_with_the_reason() {
    let verifier = verifier_for(policy());
    let mut expired = claims();
    expired["exp"] = json!(now() - 120);
    assert_eq!(rejected(verifier.caller(&rsa_token("rsa", &expired)).await), "the token has expired");
    // Within the clock skew it still passes.
    expired["exp"] = json!(now() - 10);
    assert!(verifier.caller(&rsa_token("rsa", &expired)).await.is_ok());
    let mut early = claims();
    early["nbf"] = json!(now() + 600);
    assert_eq!(
        rejected(verifier.caller(&rsa_token("rsa", &early)).await),
        "the token is not valid yet (nbf)"
    );
    let mut other_audience = claims();
    other_audience["aud"] = json!("https://other.example.com/mcp");
    assert!(rejected(verifier.caller(&rsa_token("rsa", &other_audience)).await).contains("(aud)"));
    let mut other_issuer = claims();
    other_issuer["iss"] = json!("https://evil.example.com");
    assert_eq!(
        rejected(verifier.caller(&rsa_token("rsa", &other_issuer)).await),
        "the token is from another issuer"
    );
    for missing in ["exp", "aud", "iss"] {
        let mut body = claims();
        body.as_object_mut().unwrap().remove(missing);
        assert!(rejected(verifier.caller(&rsa_token("rsa", &body)).await).contains(missing), "{missing}");
    }
    let mut no_subject = claims();
    no_subject.as_object_mut().unwrap().remove("sub");
    assert!(rejected(verifier.caller(&rsa_token("rsa", &no_subject)).await).contains("caller claim"));
    let mut long_subject = claims();
    long_subject["sub"] = json!("x".repeat(MAX_CALLER_CLAIM_BYTES + 1));
    assert!(rejected(verifier.caller(&rsa_token("rsa", &long_subject)).await).contains("too long"));
}

#[tokio::test]
async fn forged_tokens_are_rejected() {
    let verifier = verifier_for(policy());
    // Signed by a key the issuer does not publish, under a published kid.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa".into());
    let forged = encode(
        &header,
        &claims(),
        &EncodingKey::from_rsa_pem(include_bytes!("testdata/other-rsa.pem")).unwrap(),
    )
    .unwrap();
    assert_eq!(rejected(verifier.caller(&forged).await), "the token's signature does not verify");
    // Under an unknown kid (no refresh possible here).
    assert!(rejected(verifier.caller(&rsa_token("unknown", &claims())).await).contains("does not publish"));
    // `alg: none`, with and without a signature.
    let body = URL_SAFE_NO_PAD.encode(claims().to_string());
    for header in [json!({"alg": "none", "kid": "rsa"}), json!({"alg": "None"})] {
        let head = URL_SAFE_NO_PAD.encode(header.to_string());
        for token in [format!("{head}.{body}."), format!("{head}.{body}.c2ln")] {
            assert_eq!(rejected(verifier.caller(&token).await), "the token is not a signed JWT");
        }
    }
    // HMAC with the RSA public key as the secret (the classic confusion).
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa".into());
    let confused =
        encode(&header, &claims(), &EncodingKey::from_secret(include_bytes!("testdata/rsa.pub.pem")))
            .unwrap();
    assert!(rejected(verifier.caller(&confused).await).contains("not accepted"));
    // RS256 under the EC key's kid: the key's family does not match.
    assert!(verifier.caller(&rsa_token("ec", &claims())).await.is_err());
    // An allowed algorithm the key is not published for.
    let mut policy = policy();
    policy.algorithms.push(Algorithm::PS256);
    let mut header = Header::new(Algorithm::PS256);
    header.kid = Some("rsa".into());
    let token =
        encode(&header, &claims(), &EncodingKey::from_rsa_pem(include_bytes!("testdata/rsa.pem")).unwrap())
            .unwrap();
    assert!(rejected(verifier_for(policy).caller(&token).await).contains("not its key's"));
    for garbage in ["", "a.b.c", "not a jwt", "....."] {
        assert!(verifier.caller(garbage).await.is_err(), "{garbage:?}");
    }
}

#[tokio::test]
async fn missing_scopes_are_insufficient_scope() {
    let mut policy = policy();
    policy.required_scopes = vec!["mining".into()];
    let verifier = verifier_for(policy);
    assert!(verifier.caller(&rsa_token("rsa", &claims())).await.is_ok());
    let mut body = claims();
    body["scope"] = json!("openid");
    assert_eq!(verifier.caller(&rsa_token("rsa", &body)).await, Err(Refusal::InsufficientScope));
    // Entra's and Okta's `scp`, as a string or an array.
    body["scp"] = json!(["read", "mining"]);
    assert!(verifier.caller(&rsa_token("rsa", &body)).await.is_ok());
    body["scp"] = json!("mining read");
    assert!(verifier.caller(&rsa_token("rsa", &body)).await.is_ok());
}

#[test]
fn only_asymmetric_algorithms_can_be_allowed() {
    assert_eq!(parse_algorithm("RS256"), Ok(Algorithm::RS256));
    assert_eq!(parse_algorithm("EdDSA"), Ok(Algorithm::EdDSA));
    assert!(parse_algorithm("HS256").unwrap_err().contains("HMAC"));
    assert!(parse_algorithm("none").is_err());
}

#[tokio::test]
async fn an_id_token_for_the_same_audience_is_not_an_access_token() {
    let verifier = verifier_for(policy());
    // An ID token whose client id is the configured audience: signed by the
    // same issuer, within its lifetime, with the audience; refused by its claims.
    for (claim, value) in
        [("nonce", json!("n-0S6_WzA2Mj")), ("at_hash", json!("77QmUPtjPfzWtF2AnpK9RQ")), ("typ", json!("ID"))]
    {
        let mut body = claims();
        body[claim] = value;
        assert!(rejected(verifier.caller(&rsa_token("rsa", &body)).await).contains("ID token"), "{claim}");
    }
    // A header typ other than an access token's.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa".into());
    header.typ = Some("id_token+jwt".into());
    let signing = EncodingKey::from_rsa_pem(include_bytes!("testdata/rsa.pem")).unwrap();
    let typed_id = encode(&header, &claims(), &signing).unwrap();
    assert!(rejected(verifier.caller(&typed_id).await).contains("typ"));
    // With at+jwt required, an untyped JWT is refused and a typed one passes.
    let mut strict = policy();
    strict.token_type = TokenType::AtJwt;
    let strict = verifier_for(strict);
    assert!(rejected(strict.caller(&rsa_token("rsa", &claims())).await).contains("at+jwt"));
    header.typ = Some("at+jwt".into());
    let typed_access = encode(&header, &claims(), &signing).unwrap();
    assert!(strict.caller(&typed_access).await.is_ok());
    assert!(verifier.caller(&typed_access).await.is_ok());
}

#[tokio::test]
async fn an_unverified_email_names_nobody() {
    let mut policy = policy();
    policy.caller_claim = "email".into();
    let verifier = verifier_for(policy);
    let mut body = claims();
    body["email"] = json!("victim@example.com");
    for verified in [None, Some(json!(false)), Some(json!("false")), Some(json!(1))] {
        match verified {
            Some(value) => body["email_verified"] = value,
            None => drop(body.as_object_mut().unwrap().remove("email_verified")),
        }
        assert!(rejected(verifier.caller(&rsa_token("rsa", &body)).await).contains("email_verified"));
    }
    for verified in [json!(true), json!("true")] {
        body["email_verified"] = verified;
        assert!(verifier.caller(&rsa_token("rsa", &body)).await.is_ok());
    }
}

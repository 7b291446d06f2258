//! Command-line flags, each with an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use mining_api::bounds::{BLOCKS, DIFFICULTY};

use crate::auth::fetch::check_url;
use crate::auth::oidc::TokenPolicy;
use crate::tools::Limits;

/// Longest wait a call may be given: clients time out tool calls at about 60 s
/// (Claude Desktop) to 5 min (VS Code), and a wait must end well before.
pub const MAX_WAIT_BUDGET_SECONDS: u32 = 50;

/// The audience Kubernetes tokens must be minted for, unless configured.
pub const DEFAULT_TOKEN_AUDIENCE: &str = "mining-operator";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// Everyone is one anonymous caller (for a laptop; never on a shared cluster).
    None,
    /// Bearer tokens from --tokens-file (`token caller-name` lines).
    Tokens,
    /// Kubernetes bearer tokens, checked by TokenReview and SubjectAccessReview.
    Kubernetes,
    /// JWT access tokens of an OpenID issuer (OAuth 2.1 resource server,
    /// with Protected Resource Metadata for MCP hosts' sign-in).
    Oidc,
}

/// MCP server (Streamable HTTP at /mcp) that mines proof-of-work chains as MiningWorkflows.
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub struct Config {
    /// Address to serve /mcp on.
    #[arg(long, env = "LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Address to serve /healthz, /readyz and /metrics on (a port of their
    /// own, so a NetworkPolicy can expose MCP without them).
    #[arg(long, env = "METRICS_LISTEN", default_value = "127.0.0.1:9090")]
    pub metrics_listen: SocketAddr,

    /// Most connections open at once to the MCP listener; more are closed at once.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_connections: u32,

    /// Most connections open at once from one source address that is not a
    /// trusted proxy, so one client never holds the whole pool. Idle
    /// connections that never carried an authenticated request give way to
    /// newcomers, so callers sharing an address with a flood still get in.
    #[arg(long, env = "MAX_CONNECTIONS_PER_SOURCE", default_value_t = 250,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_connections_per_source: u32,

    /// Proxies (CIDRs or addresses, comma-separated) whose `Forwarded` /
    /// `X-Forwarded-For` name the client: per-client budgets key on that
    /// address, and a proxy's connections count in no per-address share.
    /// Empty (the default): the headers are ignored, whoever sends them.
    #[arg(long, env = "TRUSTED_PROXIES", default_value = "", value_parser = parse_trusted_proxies)]
    pub trusted_proxies: crate::proxies::TrustedProxies,

    /// A request head must arrive whole within this, and a keep-alive
    /// connection idle this long is closed.
    #[arg(long, env = "HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=300))]
    pub header_read_timeout_seconds: u32,

    /// Namespace of the MiningWorkflows (default: the pod's own namespace, or
    /// the kubeconfig's, else `default`).
    #[arg(long, env = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Namespace of the callers' quota ledgers (`MiningLedger`s; default:
    /// --namespace). Give it one only admins and the frontend may write (the
    /// chart: the release namespace), so no caller can restore an old ledger.
    #[arg(long, env = "LEDGER_NAMESPACE")]
    pub ledger_namespace: Option<String>,

    /// Where releases before the workflow namespace put MCP workflows (the
    /// chart: the release namespace). Those are still found, listed,
    /// counted, waited on and cancelled; new ones never go there.
    #[arg(long, env = "PREVIOUS_NAMESPACE")]
    pub previous_namespace: Option<String>,

    /// Longest a call may wait for a result before answering `running`.
    #[arg(long, env = "WAIT_BUDGET_SECONDS", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_WAIT_BUDGET_SECONDS)))]
    pub wait_budget_seconds: u32,

    /// Difficulty when start_mining is not given one.
    #[arg(long, env = "DEFAULT_DIFFICULTY", default_value_t = 21,
          value_parser = clap::value_parser!(u32).range(DIFFICULTY.clap_range()))]
    pub default_difficulty: u32,

    /// Chain length when start_mining is not given one.
    #[arg(long, env = "DEFAULT_BLOCKS", default_value_t = mining_api::bounds::DEFAULT_BLOCKS,
          value_parser = clap::value_parser!(u32).range(BLOCKS.clap_range()))]
    pub default_blocks: u32,

    /// Highest difficulty a caller may ask for.
    #[arg(long, env = "MAX_DIFFICULTY", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(DIFFICULTY.clap_range()))]
    pub max_difficulty: u32,

    /// Extra Host names to accept (e.g. the Service's DNS names), comma-separated;
    /// loopback names are always accepted.
    #[arg(long, env = "ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Browser origins allowed to call /mcp, comma-separated (requests from
    /// any other Origin are refused; requests without one are not affected).
    #[arg(long, env = "ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,

    /// How callers authenticate.
    #[arg(long, env = "AUTH", value_enum, default_value_t = AuthMode::None)]
    pub auth: AuthMode,

    /// The operator's outputs server (its `--outputs-addr`, e.g. the chart's
    /// `http://RELEASE-mining-operator-outputs.NS.svc:8082`): where runs'
    /// files are read from for `resources/read`. Unset: no file is served.
    #[arg(long, env = "OUTPUTS_URL")]
    pub outputs_url: Option<String>,

    /// Files this replica streams to callers at once, a quarter of them (at
    /// least one) per caller; more are refused with when to retry.
    #[arg(long, env = "MAX_FILE_READS", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_file_reads: u32,

    /// With --auth tokens: the file of `token caller-name` lines (re-read when it changes).
    #[arg(long, env = "TOKENS_FILE", required_if_eq("auth", "tokens"))]
    pub tokens_file: Option<PathBuf>,

    /// Which defined tools need a grant of their own: `open`, only those
    /// defined with `restricted: true`; `restricted`, every one (no
    /// definition can lift it). See docs/SECURITY.md.
    #[arg(long, env = "TOOL_ACCESS", value_enum, default_value_t = crate::tool_runs::access::AccessMode::Open)]
    pub tool_access: crate::tool_runs::access::AccessMode,

    /// With --auth oidc, tokens or none: who is granted each restricted tool, a
    /// JSON file `{"TOOL": {"subjects": [...], "groups": [...]}}` (read at
    /// start). In kubernetes mode RBAC grants them instead.
    #[arg(long, env = "TOOL_GRANTS")]
    pub tool_grants: Option<PathBuf>,

    /// With --auth kubernetes: the audiences a token must be minted for
    /// (`kubectl create token SA --audience mining-operator`), comma-separated.
    /// A token for the API server itself is refused, so none that reaches this
    /// server can be replayed against the cluster.
    #[arg(long, env = "TOKEN_AUDIENCES", value_delimiter = ',', default_value = DEFAULT_TOKEN_AUDIENCE,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub token_audiences: Vec<String>,

    /// With --auth kubernetes: how long an admitted token is trusted before it
    /// is reviewed again (so a revocation takes effect within this).
    #[arg(long, env = "AUTH_CACHE_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..=600))]
    pub auth_cache_seconds: u32,

    /// With --auth oidc: the issuer (`iss`) of accepted tokens; its keys come
    /// from `{issuer}/.well-known/openid-configuration`. https only, except
    /// on loopback addresses.
    #[arg(long, env = "OIDC_ISSUER", required_if_eq("auth", "oidc"))]
    pub oidc_issuer: Option<String>,

    /// With --auth oidc: the audiences (`aud`) a token must be issued for,
    /// comma-separated: this server's resource URL (RFC 8707, what MCP hosts
    /// ask for) or an audience configured at the issuer.
    #[arg(long, env = "OIDC_AUDIENCE", value_delimiter = ',', required_if_eq("auth", "oidc"),
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub oidc_audience: Vec<String>,

    /// With --auth oidc: scopes every token must grant (`scope` or `scp`),
    /// comma-separated; a token without them gets 403 insufficient_scope.
    #[arg(long, env = "OIDC_REQUIRED_SCOPES", value_delimiter = ',')]
    pub oidc_required_scopes: Vec<String>,

    /// With --auth oidc: the claim that names the caller (with the issuer).
    #[arg(long, env = "OIDC_CALLER_CLAIM", default_value = "sub",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub oidc_caller_claim: String,

    /// With --auth oidc: accepted signature algorithms, comma-separated
    /// (asymmetric only: `none` and HMAC are never accepted).
    #[arg(long, env = "OIDC_ALGORITHMS", value_delimiter = ',', default_value = "RS256,ES256",
          value_parser = crate::auth::oidc::parse_algorithm)]
    pub oidc_algorithms: Vec<jsonwebtoken::Algorithm>,

    /// With --auth oidc: how far `exp` and `nbf` may be off (clock skew).
    #[arg(long, env = "OIDC_CLOCK_SKEW_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    pub oidc_clock_skew_seconds: u64,

    /// With --auth oidc: which JWTs are access tokens: `access` refuses ID
    /// tokens (by `typ` and their claims), `at-jwt` requires RFC 9068's
    /// `typ: at+jwt` where the IdP issues it.
    #[arg(long, env = "OIDC_TOKEN_TYPE", value_enum, default_value = "access")]
    pub oidc_token_type: crate::auth::oidc::TokenType,

    /// With --auth oidc: a PEM bundle of CAs to trust for the issuer besides
    /// the public roots (a private IdP).
    #[arg(long, env = "OIDC_CA_FILE")]
    pub oidc_ca_file: Option<PathBuf>,

    /// With --auth oidc and the Kubernetes API server as issuer: read its
    /// keys from `/openid/v1/jwks` through this server's own Kubernetes
    /// client instead of from the issuer URL (which pods resolve, but whose
    /// discovery needs the cluster CA and credentials).
    #[arg(long, env = "OIDC_KUBERNETES_KEYS")]
    pub oidc_kubernetes_keys: bool,

    /// The URL clients reach /mcp at, when it is not `http://{Host}/mcp`
    /// (behind an Ingress or TLS proxy): the resource of the Protected
    /// Resource Metadata.
    #[arg(long, env = "PUBLIC_URL")]
    pub public_url: Option<String>,

    /// The secret (at least 32 bytes; e.g. `head -c 32 /dev/urandom | base64`)
    /// behind ownership proofs and workflow ids. Every replica needs the same
    /// one; the chart keeps it in a Secret. Whoever has it can make
    /// workflows that pass for any caller's.
    #[arg(long, env = "OWNERSHIP_KEY_FILE")]
    pub ownership_key_file: PathBuf,

    /// During a key rotation: the previous key, whose proofs and ids still
    /// verify until it is removed (new ones use --ownership-key-file).
    #[arg(long, env = "PREVIOUS_OWNERSHIP_KEY_FILE")]
    pub previous_ownership_key_file: Option<PathBuf>,

    /// Most unfinished workflows one caller may have (exact across replicas).
    #[arg(long, env = "MAX_RUNNING_PER_CALLER", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_running_per_caller: u32,

    /// Most workflows one caller may start per minute (exact across
    /// replicas). With the operator's retention it bounds how many finished
    /// workflows one caller can leave stored: this × 60 × 24 a day.
    #[arg(long, env = "MAX_STARTS_PER_MINUTE", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_starts_per_minute: u32,

    /// Most calls of one caller that wait at once on this replica (tool
    /// budgets and 2025-11-25 `tasks/result`); beyond it a call answers at
    /// once, as `wait_seconds: 0` would.
    #[arg(long, env = "MAX_WAITS_PER_CALLER", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_waits_per_caller: u32,

    /// Most calls that wait at once on this replica, over every caller.
    #[arg(long, env = "MAX_WAITS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_waits: u32,

    /// Most `subscriptions/listen` streams one caller holds open at once on
    /// this replica; one more is refused, saying so, until one closes.
    #[arg(long, env = "MAX_LISTENS_PER_CALLER", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_listens_per_caller: u32,

    /// Most `subscriptions/listen` streams open at once on this replica, over every caller.
    #[arg(long, env = "MAX_LISTENS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_listens: u32,

    /// How long the operator keeps finished workflows that set no
    /// ttlSecondsAfterFinished (its --default-ttl-seconds): the `ttl` tasks report.
    #[arg(long, env = "DEFAULT_TTL_SECONDS", default_value_t = 86_400,
          value_parser = clap::value_parser!(u64).range(1..=mining_api::bounds::MAX_DURATION_SECONDS as u64))]
    pub default_ttl_seconds: u64,

    /// How often to list who holds every caller's runs in the workflow
    /// namespace (`mining_api::reach`; docs/SECURITY.md): a metric, and a
    /// warning Event and log line when the set changes. 0: never. Needs
    /// RBAC read access and SubjectAccessReviews (the chart's `-audit`
    /// ClusterRole, on by default there).
    #[arg(long, env = "AUDIT_INTERVAL_SECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=86_400))]
    pub audit_interval_seconds: u32,

    /// The namespace this product is installed in: its ServiceAccounts are
    /// the product's own, never listed by the audit (default: the
    /// operator Lease's namespace).
    #[arg(long, env = "PRODUCT_NAMESPACE")]
    pub product_namespace: Option<String>,

    /// The operator's leader Lease, NAMESPACE/NAME (the chart's
    /// `RELEASE-mining-operator-operator` in the release namespace). Read
    /// every few seconds: while no operator holds it, unfinished workflows
    /// answer that no operator is running. Unset: nothing is said.
    #[arg(long, env = "OPERATOR_LEASE", value_parser = parse_lease_ref)]
    pub operator_lease: Option<(String, String)>,

    /// Longest one 2025-11-25 `tasks/result` call waits for its task before
    /// answering with an error that says to call again.
    #[arg(long, env = "TASK_RESULT_WAIT_SECONDS", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=3_600))]
    pub task_result_wait_seconds: u32,

    /// Tasks per 2025-11-25 `tasks/list` page.
    #[arg(long, env = "TASK_LIST_PAGE_SIZE", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub task_list_page_size: u32,

    /// Largest request body accepted, in bytes (larger ones get 413).
    #[arg(long, env = "MAX_REQUEST_BYTES", default_value_t = 256 * 1024,
          value_parser = clap::value_parser!(u32).range(1024..=16 * 1024 * 1024))]
    pub max_request_bytes: u32,
}

impl Config {
    /// The `--auth oidc` settings, checked; `None` in the other modes.
    pub fn token_policy(&self) -> Result<Option<TokenPolicy>, String> {
        if self.auth != AuthMode::Oidc {
            return Ok(None);
        }
        let issuer = self.oidc_issuer.clone().ok_or("--auth oidc needs --oidc-issuer")?;
        check_url(&issuer).map_err(|e| format!("--oidc-issuer: {e}"))?;
        // OpenID Connect: an issuer has no query or fragment.
        if issuer.contains(['?', '#']) {
            return Err(format!("--oidc-issuer `{issuer}` has a query or fragment"));
        }
        if self.oidc_audience.is_empty() {
            return Err("--auth oidc needs --oidc-audience".into());
        }
        if let Some(url) = &self.public_url {
            check_url(url).map_err(|e| format!("--public-url: {e}"))?;
        }
        let required_scopes: Vec<String> =
            self.oidc_required_scopes.iter().filter(|s| !s.is_empty()).cloned().collect();
        // RFC 6749 §3.3: a scope is printable ASCII without space, `"` or `\`,
        // which is also what keeps the challenge header well-formed.
        if let Some(bad) = required_scopes
            .iter()
            .find(|s| !s.bytes().all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) && b != b'\\'))
        {
            return Err(format!("--oidc-required-scopes: `{bad}` is not a valid scope"));
        }
        Ok(Some(TokenPolicy {
            issuer,
            audiences: self.oidc_audience.clone(),
            required_scopes,
            caller_claim: self.oidc_caller_claim.clone(),
            algorithms: self.oidc_algorithms.clone(),
            clock_skew_seconds: self.oidc_clock_skew_seconds,
            token_type: self.oidc_token_type,
        }))
    }

    /// The bounds tool arguments are checked against; refuses a default
    /// difficulty above the maximum.
    pub fn limits(&self) -> Result<Limits, String> {
        if self.default_difficulty > self.max_difficulty {
            return Err(format!(
                "--default-difficulty {} is above --max-difficulty {}",
                self.default_difficulty, self.max_difficulty
            ));
        }
        Ok(Limits {
            max_difficulty: self.max_difficulty,
            default_difficulty: self.default_difficulty,
            default_blocks: self.default_blocks,
            wait_budget_seconds: self.wait_budget_seconds,
        })
    }
}

/// `NAMESPACE/NAME` of a Lease, each a DNS label (namespace) or subdomain (name).
fn parse_lease_ref(text: &str) -> Result<(String, String), String> {
    let (namespace, name) = text.split_once('/').ok_or_else(|| format!("{text:?} is not NAMESPACE/NAME"))?;
    let label = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !s.starts_with(['-', '.'])
            && !s.ends_with(['-', '.'])
    };
    if !label(namespace, 63) || namespace.contains('.') || !label(name, 253) {
        return Err(format!("{text:?} is not NAMESPACE/NAME of Kubernetes names"));
    }
    Ok((namespace.to_string(), name.to_string()))
}

fn parse_trusted_proxies(text: &str) -> Result<crate::proxies::TrustedProxies, String> {
    crate::proxies::TrustedProxies::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documentation() {
        let config = Config::try_parse_from(["mcp-frontend", "--ownership-key-file", "/key"]).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.auth, AuthMode::None);
        assert_eq!(
            config.limits().unwrap(),
            Limits { max_difficulty: 32, default_difficulty: 21, default_blocks: 4, wait_budget_seconds: 20 }
        );
        assert_eq!(config.max_running_per_caller, 20);
        assert_eq!(config.token_audiences, [DEFAULT_TOKEN_AUDIENCE]);
        assert_eq!(config.operator_lease, None);
        let config = Config::try_parse_from([
            "mcp-frontend",
            "--ownership-key-file",
            "/key",
            "--operator-lease",
            "mining/r-mining-operator-operator",
        ])
        .unwrap();
        assert_eq!(config.operator_lease, Some(("mining".into(), "r-mining-operator-operator".into())));
    }

    #[test]
    fn out_of_range_flags_are_refused_at_start() {
        for args in [
            &["--wait-budget-seconds", "51"][..],
            &["--max-difficulty", "65"],
            &["--default-blocks", "0"],
            &["--auth", "tokens"],
            &["--max-difficulty", "99999999999999999999"],
            &["--token-audiences", ""],
            &["--auth-cache-seconds", "0"],
            &["--operator-lease", "mining"],
            &["--operator-lease", "Mining/lease"],
            &["--operator-lease", "a.b/lease"],
            &["--operator-lease", "mining/"],
            &["--auth", "oidc"],
            &["--auth", "oidc", "--oidc-issuer", "https://idp.example.com"],
            &["--oidc-algorithms", "HS256"],
            &["--oidc-algorithms", "none"],
            &["--oidc-clock-skew-seconds", "601"],
        ] {
            let args = ["mcp-frontend", "--ownership-key-file", "/key"].iter().chain(args);
            assert!(Config::try_parse_from(args.clone()).is_err(), "{:?}", args.collect::<Vec<_>>());
        }
        assert!(Config::try_parse_from(["mcp-frontend"]).is_err(), "no ownership key, no start");
        let config = Config::try_parse_from([
            "mcp-frontend",
            "--ownership-key-file",
            "/key",
            "--max-difficulty",
            "10",
        ])
        .unwrap();
        assert!(config.limits().unwrap_err().contains("above --max-difficulty"));
    }

    #[test]
    fn oidc_settings_are_checked_at_start() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["mcp-frontend", "--ownership-key-file", "/key", "--auth", "oidc"];
            args.extend_from_slice(extra);
            Config::try_parse_from(args).unwrap().token_policy()
        };
        let policy = parse(&[
            "--oidc-issuer",
            "https://idp.example.com/realms/a",
            "--oidc-audience",
            "https://mcp.example.com/mcp",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(policy.caller_claim, "sub");
        assert_eq!(policy.algorithms, [jsonwebtoken::Algorithm::RS256, jsonwebtoken::Algorithm::ES256]);
        assert_eq!(policy.clock_skew_seconds, 60);
        assert!(parse(&["--oidc-issuer", "http://127.0.0.1:9000", "--oidc-audience", "a"]).is_ok());
        for (issuer, why) in [
            ("http://idp.example.com", "only https"),
            ("https://idp.example.com/?x=1", "query or fragment"),
            ("idp.example.com", "not"),
        ] {
            let error = parse(&["--oidc-issuer", issuer, "--oidc-audience", "a"]).unwrap_err();
            assert!(error.contains(why), "{issuer}: {error}");
        }
        let error =
            parse(&["--oidc-issuer", "https://i", "--oidc-audience", "a", "--oidc-required-scopes", "a\"b"])
                .unwrap_err();
        assert!(error.contains("not a valid scope"), "{error}");
        let tokens_mode = Config::try_parse_from(["mcp-frontend", "--ownership-key-file", "/key"]).unwrap();
        assert!(tokens_mode.token_policy().unwrap().is_none());
    }

    #[test]
    fn allowed_hosts_are_a_comma_separated_list() {
        let args =
            ["mcp-frontend", "--ownership-key-file", "/key", "--allowed-hosts", "a.svc,a.svc.cluster.local"];
        let config = Config::try_parse_from(args).unwrap();
        assert_eq!(config.allowed_hosts, ["a.svc", "a.svc.cluster.local"]);
    }
}

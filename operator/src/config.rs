//! Operator configuration, from flags or environment variables.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use mining_api::bounds::{BLOCKS, DIFFICULTY, PARALLELISM};

#[derive(Parser, Debug, Clone)]
#[command(name = "operator", version, about = "Reconciles MiningWorkflows into one verified Job per block")]
pub struct Config {
    /// Namespace to watch; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Image the block Jobs run; its entrypoint is `miner`.
    #[arg(long, env = "MINER_IMAGE", default_value = "localhost/mining-operator/miner:dev")]
    pub miner_image: String,
    #[arg(long, env = "MINER_IMAGE_PULL_POLICY", default_value = "IfNotPresent")]
    pub miner_image_pull_policy: String,
    /// Secrets (in each workflow's namespace) the block Jobs pull the miner
    /// image with: their `imagePullSecrets`. Repeat, or separate with commas.
    #[arg(long = "miner-image-pull-secret", env = "MINER_IMAGE_PULL_SECRETS", value_delimiter = ',')]
    pub miner_image_pull_secrets: Vec<String>,
    /// The OTLP/HTTP collector block Jobs report their spans to (the Jobs'
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`); unset: Jobs export nothing, and still
    /// log their trace id. Pods must be able to reach it.
    #[arg(long, env = "MINER_OTLP_ENDPOINT")]
    pub miner_otlp_endpoint: Option<String>,
    /// The Jobs' `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` or `http/json`.
    #[arg(long, env = "MINER_OTLP_PROTOCOL", default_value = "http/protobuf",
          value_parser = ["http/protobuf", "http/json"])]
    pub miner_otlp_protocol: String,
    /// Search threads per miner (`miner mine --threads`).
    #[arg(long, env = "MINER_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub miner_threads: u32,
    #[command(flatten)]
    pub job: JobSettings,
    #[command(flatten)]
    pub limits: Limits,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "HTTP_ADDR", default_value = "0.0.0.0:8081")]
    pub http_addr: SocketAddr,
    #[command(flatten)]
    pub election: Election,
    /// The MCP frontend's ownership key (its Secret's `current`, mounted
    /// read-only): with it, a workflow with a caller label queues as that
    /// caller's only when the frontend's proof verifies; without it every
    /// workflow queues with its namespace's direct creators.
    #[arg(long, env = "OWNERSHIP_KEY_FILE")]
    pub ownership_key_file: Option<std::path::PathBuf>,
    /// The previous key during a rotation (`previous`), if any.
    #[arg(long, env = "PREVIOUS_OWNERSHIP_KEY_FILE")]
    pub previous_ownership_key_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub outputs: OutputSettings,
}

/// Where tool runs' files go (see `crate::outputs`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct OutputSettings {
    /// The store of tool runs' files: `file:///DIR` (the embedded store: a
    /// directory of the operator, on a volume) or `s3://BUCKET[/PREFIX]`
    /// (any S3-compatible service; credentials, region and endpoint from
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`,
    /// `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`). Unset: tools hand over no files.
    /// Needs the ownership key (tokens are derived from it).
    #[arg(long = "outputs-store", env = "OUTPUTS_STORE", requires = "url")]
    pub store: Option<String>,
    /// The embedded store's directory is one volume every replica mounts
    /// (the chart's PersistentVolumeClaim): no copies between replicas, and
    /// only the leader sweeps it. Without it each replica's is its own.
    #[arg(long = "outputs-store-shared", env = "OUTPUTS_STORE_SHARED")]
    pub shared_volume: bool,
    /// The base URL tool Pods upload to (this operator's outputs server as
    /// Pods reach it, e.g. the chart's Service `http://NAME.NS.svc:8082`).
    #[arg(long = "outputs-url", env = "OUTPUTS_URL", requires = "store")]
    pub url: Option<String>,
    /// Address of the outputs server (uploads from tool Pods, reads by the frontend).
    #[arg(long = "outputs-addr", env = "OUTPUTS_ADDR", default_value = "0.0.0.0:8082")]
    pub addr: SocketAddr,
    /// Largest file a run may hand over.
    #[arg(long = "outputs-max-file-bytes", env = "OUTPUTS_MAX_FILE_BYTES",
          default_value_t = mining_api::tool_outputs::DEFAULT_MAX_FILE_BYTES)]
    pub max_file_bytes: u64,
    /// Largest sum of one run's files.
    #[arg(long = "outputs-max-run-bytes", env = "OUTPUTS_MAX_RUN_BYTES",
          default_value_t = mining_api::tool_outputs::DEFAULT_MAX_RUN_BYTES)]
    pub max_run_bytes: u64,
    /// Largest sum of every run's files in the store.
    #[arg(long = "outputs-max-total-bytes", env = "OUTPUTS_MAX_TOTAL_BYTES",
          default_value_t = mining_api::tool_outputs::DEFAULT_MAX_TOTAL_BYTES)]
    pub max_total_bytes: u64,
    /// Uploads streaming at once (each holds up to 5 MiB in memory).
    #[arg(long = "outputs-uploads-at-once", env = "OUTPUTS_UPLOADS_AT_ONCE", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub uploads_at_once: u32,
    /// Largest sum of the files of one caller's runs (its share of the
    /// store; default a quarter of --outputs-max-total-bytes). Runs without
    /// the frontend's proof share one party's.
    #[arg(long = "outputs-max-caller-bytes", env = "OUTPUTS_MAX_CALLER_BYTES")]
    pub max_caller_bytes: Option<u64>,
    /// Uploads of one caller's runs streaming at once (default: a quarter
    /// of --outputs-uploads-at-once, at least 1), so no caller's tools hold
    /// every upload slot.
    #[arg(long = "outputs-uploads-per-caller", env = "OUTPUTS_UPLOADS_PER_CALLER",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub uploads_per_caller: Option<u32>,
}

/// Leader election: several replicas, one reconciling.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Election {
    /// Take part in leader election (for running more than one replica);
    /// without it this process reconciles alone.
    #[arg(id = "leader_elect", long = "leader-elect", env = "LEADER_ELECT", default_value_t = false)]
    pub enabled: bool,
    /// The Lease the replicas compete for.
    #[arg(
        id = "leader_election_lease",
        long = "leader-election-lease",
        env = "LEADER_ELECTION_LEASE",
        default_value = "mining-operator"
    )]
    pub lease: String,
    /// Namespace of the Lease: by default this Pod's own, else the watched one, else `default`.
    #[arg(id = "leader_election_namespace", long = "leader-election-namespace", env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Seconds a leader's lease lasts without renewal; a standby takes over
    /// at most this long after the leader stops renewing.
    #[arg(id = "leader_election_lease_seconds", long = "leader-election-lease-seconds", env = "LEADER_ELECTION_LEASE_SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(3..=3600))]
    pub lease_seconds: u64,
    /// This replica's name in the Lease (the Pod name in a cluster).
    #[arg(id = "leader_election_identity", long = "leader-election-identity", env = "POD_NAME")]
    pub identity: Option<String>,
}

/// How each block's Job is run.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// Pod retries per block before the block, and the workflow, fails.
    #[arg(long = "job-backoff-limit", env = "JOB_BACKOFF_LIMIT", default_value_t = 2,
          value_parser = clap::value_parser!(i32).range(0..=100))]
    pub backoff_limit: i32,
    /// Seconds a block's Job may run before it fails.
    #[arg(long = "job-active-deadline-seconds", env = "JOB_ACTIVE_DEADLINE_SECONDS",
          value_parser = clap::value_parser!(i64).range(1..=mining_api::bounds::MAX_DURATION_SECONDS))]
    pub active_deadline_seconds: Option<i64>,
    #[arg(long = "job-cpu-request", env = "JOB_CPU_REQUEST", default_value = "100m")]
    pub cpu_request: Option<String>,
    #[arg(long = "job-cpu-limit", env = "JOB_CPU_LIMIT")]
    pub cpu_limit: Option<String>,
    #[arg(long = "job-memory-request", env = "JOB_MEMORY_REQUEST", default_value = "16Mi")]
    pub memory_request: Option<String>,
    #[arg(long = "job-memory-limit", env = "JOB_MEMORY_LIMIT", default_value = "64Mi")]
    pub memory_limit: Option<String>,
    /// Put every Job of both kinds (blocks and tool runs) in this Kueue
    /// LocalQueue (label `kueue.x-k8s.io/queue-name`). A queue controller then
    /// decides when each starts: a block's Job it holds suspended waits
    /// instead of failing, and the node selector, affinity and tolerations it
    /// sets at admission are its to set.
    #[arg(long = "job-queue-name", env = "JOB_QUEUE_NAME", value_parser = label_value)]
    pub queue_name: Option<String>,
}

/// A Kubernetes label value: at most 63 characters, alphanumerics and
/// `-_.`, beginning and ending with an alphanumeric.
fn label_value(text: &str) -> Result<String, String> {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let valid = text.len() <= 63
        && ends_ok(text.chars().next())
        && ends_ok(text.chars().last())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if valid {
        Ok(text.to_string())
    } else {
        Err(format!("{text:?} is not a label value (1-63 of [A-Za-z0-9-_.])"))
    }
}

impl Limits {
    /// The slots all work shares, and each kind's cap inside them.
    pub fn budget(&self) -> crate::admission::Budget {
        let sum = self.max_concurrent_workflows.saturating_add(self.max_concurrent_tool_runs);
        use crate::admission::{Budget, WorkKind};
        let mut budget = Budget::new(self.max_concurrent_work.unwrap_or(sum))
            .capping(WorkKind::of::<mining_api::MiningWorkflow>(), self.max_concurrent_workflows)
            .capping(WorkKind::of::<mining_api::ToolRun>(), self.max_concurrent_tool_runs);
        if self.max_tool_runs_per_caller > 0 {
            budget = budget
                .capping_per_party(WorkKind::of::<mining_api::ToolRun>(), self.max_tool_runs_per_caller);
        }
        if self.max_work_per_namespace > 0 {
            budget = budget.capping_per_namespace(self.max_work_per_namespace);
        }
        if self.capacity_wait_seconds > 0 {
            budget = budget.giving_back_after(Duration::from_secs(self.capacity_wait_seconds));
        }
        match self.preempt_after_seconds {
            0 => budget,
            seconds => budget.preempting_after(Duration::from_secs(seconds)),
        }
    }
}

/// What the operator accepts and how long it keeps finished workflows.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Limits {
    /// Workflows asking for more leading zero bits are rejected.
    #[arg(long, env = "MAX_DIFFICULTY", default_value_t = 40,
          value_parser = clap::value_parser!(u32).range(DIFFICULTY.clap_range()))]
    pub max_difficulty: u32,
    /// Workflows asking for longer chains are rejected.
    #[arg(long, env = "MAX_BLOCKS", default_value_t = BLOCKS.max,
          value_parser = clap::value_parser!(u32).range(BLOCKS.clap_range()))]
    pub max_blocks: u32,
    /// Workflows mining at once; more wait as Pending (condition Admitted=False, reason Queued).
    #[arg(long, env = "MAX_CONCURRENT_WORKFLOWS", default_value_t = 50,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub max_concurrent_workflows: usize,
    /// Tool runs (calls of McpTools) running at once; more wait as Pending,
    /// a free slot going to the caller holding the fewest.
    #[arg(long, env = "MAX_CONCURRENT_TOOL_RUNS", default_value_t = 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub max_concurrent_tool_runs: usize,
    /// Slots for all work at once (workflows and tool runs wait in one fair
    /// queue for them, each kind within its own cap above); unset: the sum
    /// of the two caps, so neither kind ever waits for the other.
    #[arg(long, env = "MAX_CONCURRENT_WORK",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=110_000))]
    pub max_concurrent_work: Option<usize>,
    /// Tool runs one party (an MCP caller) may run at once, whatever is
    /// free. A tool run cannot be stopped and resumed, so it never gives a
    /// slot back: this cap, not preemption, keeps one caller's long runs
    /// from holding every tool-run slot while others wait (a party at it
    /// waits, saying so). 0: no cap but `--max-concurrent-tool-runs`.
    #[arg(long, env = "MAX_TOOL_RUNS_PER_CALLER", default_value_t = 5,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=10_000))]
    pub max_tool_runs_per_caller: usize,
    /// Slots one namespace may hold at once (workflows and tool runs
    /// together), whatever is free: a quota per namespace. 0: no cap.
    #[arg(long, env = "MAX_WORK_PER_NAMESPACE", default_value_t = 0,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=110_000))]
    pub max_work_per_namespace: usize,
    /// How long the head of the queue waits, every slot taken, before work
    /// holding more than its share gives a slot back mid-block (a mining
    /// workflow's running block is mined again when it resumes; its mined
    /// blocks are kept). 0: slots are given back only at block boundaries,
    /// which a long block may never reach.
    #[arg(long, env = "PREEMPT_AFTER_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub preempt_after_seconds: u64,
    /// How long work holding a slot waits for its Pods to get a node (the
    /// scheduler: "Insufficient …", "Too many pods") before it gives the
    /// slot back and queues again (condition Admitted=False, reason
    /// NoCapacity), nothing it did lost: a budget larger than the cluster
    /// runs then holds no slot for work that cannot run. 0: it waits as
    /// long as it takes.
    #[arg(long, env = "CAPACITY_WAIT_SECONDS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub capacity_wait_seconds: u64,
    /// Finished workflows are deleted after this long unless their spec says otherwise.
    #[arg(long = "default-ttl-seconds", env = "DEFAULT_TTL_SECONDS", default_value_t = 86_400,
          value_parser = clap::value_parser!(u64).range(0..=mining_api::bounds::MAX_DURATION_SECONDS as u64))]
    pub default_ttl_seconds: u64,
    /// A result's nonce is checked to be the smallest (a scan from 0) when it
    /// is at most this; larger ones are recorded with minimalityChecked=false.
    #[arg(long = "minimality-check-budget", env = "MINIMALITY_CHECK_BUDGET", default_value_t = DEFAULT_MINIMALITY_BUDGET,
          value_parser = clap::value_parser!(u64).range(0..=(1u64 << 40)))]
    pub minimality_check_budget: u64,
    /// Pods one block may use at once (`spec.parallelism` is capped at this).
    #[arg(long, env = "MAX_PARALLELISM", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(PARALLELISM.clap_range()))]
    pub max_parallelism: u32,
    /// Nonces per range when a block is split across Pods; by default the
    /// block's expected work cut into four ranges per Pod. At least 1024: a
    /// block keeps the Jobs of its finished ranges until it is decided, so
    /// tiny ranges would mean thousands of Jobs.
    #[arg(long, env = "NONCE_RANGE_SIZE", value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 62)))]
    pub nonce_range_size: Option<u64>,
    /// How long work waits for Pods that cannot start for a cause that may
    /// clear (an image pull back-off, a used-up ResourceQuota, no node that
    /// matches) before it fails; causes that cannot clear (refused by
    /// admission, an invalid image name, a missing Secret key) fail at
    /// once, and full nodes are waited for without a bound. An McpTool's
    /// `podStartTimeoutSeconds` may shorten it for its runs.
    #[arg(long, env = "POD_START_TIMEOUT_SECONDS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub pod_start_timeout_seconds: u64,
}

/// Default of `--minimality-check-budget`: 2^24 hashes, about half a second
/// of one core, which covers nonces up to difficulty ~20 on average.
pub const DEFAULT_MINIMALITY_BUDGET: u64 = 1 << 24;

impl Limits {
    pub fn default_ttl(&self) -> Duration {
        Duration::from_secs(self.default_ttl_seconds)
    }

    pub fn pod_start_timeout(&self) -> Duration {
        Duration::from_secs(self.pod_start_timeout_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_flags_are_refused_at_start() {
        for args in [
            &["operator", "--default-ttl-seconds", "99999999999999"][..],
            &["operator", "--job-active-deadline-seconds", "0"],
            &["operator", "--max-difficulty", "65"],
            &["operator", "--max-blocks", "0"],
            &["operator", "--max-concurrent-workflows", "0"],
            &["operator", "--job-backoff-limit", "-1"],
            &["operator", "--max-parallelism", "65"],
            &["operator", "--nonce-range-size", "0"],
            &["operator", "--nonce-range-size", "1023"],
            &["operator", "--leader-election-lease-seconds", "2"],
            &["operator", "--leader-election-lease-seconds", "18446744073709551616"],
            &["operator", "--pod-start-timeout-seconds", "0"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
        let config = Config::try_parse_from(["operator", "--default-ttl-seconds", "315360000"]).unwrap();
        assert_eq!(config.limits.default_ttl_seconds, mining_api::bounds::MAX_DURATION_SECONDS as u64);
    }
}

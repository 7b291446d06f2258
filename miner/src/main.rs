//! `miner`: mine one block, a whole chain, or verify a block.
//!
//! stdout carries only result documents (one JSON line per block); everything
//! else goes to stderr. Bad input exits 2 with one line on stderr.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use mining_api::trace::{TRACEPARENT_ENV, TraceParent};
use mining_api::{BlockResult, GENESIS};

#[derive(Parser)]
#[command(name = "miner", version, about = "Proof-of-work miner: SHA-256 over \"{index}:{prev}:{nonce}\"")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mine one block and print its result as one JSON line.
    Mine {
        /// 1-based position of the block in its chain.
        #[arg(long, value_parser = parse_positive)]
        index: u64,
        /// The previous block's hash (64 hex digits), or GENESIS for block 1.
        #[arg(long, value_parser = parse_prev)]
        prev: String,
        #[command(flatten)]
        search: SearchArgs,
        /// Search only nonces from this one on (with --count: one range of a
        /// block split across Pods). Prints a no-winner document when the
        /// range holds no winner.
        #[arg(long)]
        start: Option<u64>,
        /// Search only this many nonces (from --start, or 0).
        #[arg(long, value_parser = parse_positive)]
        count: Option<u64>,
        /// Also write the result here; a container's termination message by default.
        #[arg(long, default_value = "/dev/termination-log")]
        result_file: PathBuf,
    },
    /// Mine a chain of blocks, printing one JSON line per block.
    Chain {
        /// Number of blocks.
        #[arg(long, value_parser = parse_positive)]
        blocks: u64,
        #[command(flatten)]
        search: SearchArgs,
    },
    /// Check a block; prints its hash and exits 0 when valid, 1 when not.
    Verify {
        #[arg(long, value_parser = parse_positive)]
        index: u64,
        #[arg(long, value_parser = parse_prev)]
        prev: String,
        #[arg(long)]
        nonce: u64,
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=miner::MAX_DIFFICULTY as i64))]
        difficulty: u32,
    },
}

#[derive(clap::Args)]
struct SearchArgs {
    /// Leading zero bits the block's hash must have (1 to 256).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=miner::MAX_DIFFICULTY as i64))]
    difficulty: u32,
    /// Search threads; defaults to the CPUs this process may use (cgroup quota aware).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: Option<u32>,
}

impl SearchArgs {
    fn threads(&self) -> usize {
        // available_parallelism honours affinity masks and cgroup CPU quotas.
        self.threads
            .map(|t| t as usize)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

fn parse_positive(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number from 1 up".to_string()),
    }
}

fn parse_prev(value: &str) -> Result<String, String> {
    miner::validate_prev(value)
        .map(|()| value.to_string())
        .map_err(|_| format!("expected {GENESIS} or 64 hex digits (the previous block's hash)"))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            // --help and --version
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            // One clear line: clap's first paragraph names the argument and the
            // problem (sometimes over two lines); the usage after it is noise here.
            let rendered = err.to_string();
            let first_paragraph: Vec<&str> =
                rendered.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
            eprintln!("miner: {}", first_paragraph.join(" ").trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    // A block Job's trace (TRACEPARENT, from the workflow): its id goes on
    // every line; with OTEL_EXPORTER_OTLP_ENDPOINT set, the work is also
    // reported as one span of that trace, flushed before the process exits.
    let parent = std::env::var(TRACEPARENT_ENV).ok().and_then(|text| TraceParent::parse(&text));
    let _ = TRACE_SUFFIX.set(parent.map(|p| format!(" trace_id={}", p.trace_id_hex())).unwrap_or_default());
    let exporting = telemetry::export_configured(|name| std::env::var(name).ok());
    let telemetry = exporting.then(|| telemetry::init("miner", "warn,miner=info"));
    let span = tracing::info_span!("mine", command = cli.command.name());
    if let Some(parent) = &parent {
        telemetry::continue_trace(&span, parent);
    }
    let code = match span.in_scope(|| run(cli.command)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("miner: {err}{}", trace_suffix());
            ExitCode::FAILURE
        }
    };
    drop(span);
    drop(telemetry);
    code
}

/// ` trace_id=…` when the miner runs in a traced Job, else nothing.
static TRACE_SUFFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn trace_suffix() -> &'static str {
    TRACE_SUFFIX.get().map_or("", String::as_str)
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Self::Mine { .. } => "mine",
            Self::Chain { .. } => "chain",
            Self::Verify { .. } => "verify",
        }
    }
}

fn run(command: Command) -> Result<ExitCode, miner::Error> {
    match command {
        Command::Mine { index, prev, search, start: None, count: None, result_file } => {
            let result = mine_and_report(index, &prev, &search)?;
            write_result_file(&result_file, &result.to_json_line());
        }
        Command::Mine { index, prev, search, start, count, result_file } => {
            let (start, count) = (start.unwrap_or(0), count.unwrap_or(u64::MAX));
            let line = mine_range_and_report(index, &prev, &search, start, count)?;
            write_result_file(&result_file, &line);
        }
        Command::Chain { blocks, search } => {
            let mut prev = GENESIS.to_string();
            for index in 1..=blocks {
                prev = mine_and_report(index, &prev, &search)?.hash;
            }
        }
        Command::Verify { index, prev, nonce, difficulty } => {
            return Ok(match miner::verify_block(index, &prev, nonce, difficulty) {
                Ok(hash) => {
                    println!("{hash}");
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("miner: invalid block: {err}");
                    ExitCode::FAILURE
                }
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Mines one block, prints its JSON line on stdout and a summary on stderr.
fn mine_and_report(index: u64, prev: &str, search: &SearchArgs) -> Result<BlockResult, miner::Error> {
    let threads = search.threads();
    let started = Instant::now();
    let found = miner::mine_block(index, prev, search.difficulty, threads)?;
    let elapsed = started.elapsed();
    let result = miner::block_result(index, prev, search.difficulty, &found, elapsed.as_millis() as u64);
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (e.g. piped into `head`) is not the miner's failure.
    let _ = writeln!(stdout, "{}", result.to_json_line()).and_then(|()| stdout.flush());
    let rate = result.attempts as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6;
    eprintln!(
        "miner: block={index} nonce={} attempts={} elapsed_ms={} rate_mhs={rate:.1} threads={threads} engine={}{}",
        result.nonce,
        result.attempts,
        result.elapsed_ms,
        miner::Engine::best().name(),
        trace_suffix()
    );
    Ok(result)
}

/// Mines one nonce range, prints its winner's or its no-winner document and
/// returns that line.
fn mine_range_and_report(
    index: u64,
    prev: &str,
    search: &SearchArgs,
    start: u64,
    count: u64,
) -> Result<String, miner::Error> {
    let threads = search.threads();
    let started = Instant::now();
    let found = miner::mine_range(index, prev, search.difficulty, threads, start, count)?;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let report =
        miner::range_report(index, prev, search.difficulty, (start, count), found.as_ref(), elapsed_ms);
    let line = report.to_json_line();
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    eprintln!(
        "miner: block={index} range={start}+{count} winner={} elapsed_ms={elapsed_ms} threads={threads}{}",
        found.map_or("none".to_string(), |f| f.nonce.to_string()),
        trace_suffix()
    );
    Ok(line)
}

/// Writes the result where Kubernetes reads the termination message. Outside
/// a container that path usually is not writable: warn and go on.
fn write_result_file(path: &PathBuf, line: &str) {
    if let Err(err) = std::fs::write(path, line) {
        eprintln!("miner: warning: could not write result to {}: {err}", path.display());
    }
}

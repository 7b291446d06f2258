//! What the benchmark binaries (src/bin/*-bench.rs) share: percentiles,
//! their one-line summary, and a frontend's limits lifted.

/// The `p` quantile (0–1) of sorted samples, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Prints `name n= p50 p99 max` of samples in milliseconds; returns the p50.
pub fn summary(name: &str, mut millis: Vec<f64>) -> f64 {
    millis.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&millis, 0.5), percentile(&millis, 0.99));
    println!(
        "{name:<40} n={:<5} p50 {p50:8.3} ms  p99 {p99:8.3} ms  max {:8.3} ms",
        millis.len(),
        millis[millis.len() - 1]
    );
    p50
}

/// A benchmark's frontend with the per-source and per-caller limits lifted,
/// so that its one source, its starts and its stored work are not what it
/// measures.
pub const FRONTEND_LIMITS_LIFTED: &[&str] = &[
    "--max-connections-per-source",
    "100000",
    "--max-running-per-caller",
    "1000",
    "--max-starts-per-minute",
    "1000",
];

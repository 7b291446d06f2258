//! What the benchmark binaries (src/bin/*-bench.rs) share: percentiles and
//! their one-line summary.

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

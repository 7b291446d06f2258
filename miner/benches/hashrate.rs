//! Attempts per second of each way to hash a nonce, measured side by side.
//!
//! `cargo bench -p miner --bench hashrate` (add `-- --quick` for a short run).
//! Each variant runs for a fixed wall time per round; rounds alternate between
//! variants so that a noisy neighbour hurts all of them alike, and the median
//! round is reported. Ratios are against the naive loop of the same run.

use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use miner::search::{BlockTemplate, Engine, hash_range};
use sha2::{Digest, Sha256};

const PREV: &str = "0000D4D2D7528A13875C890C35CB2F47CEDEF5501E7660DA10256E682044FCFF";
const INDEX: u64 = 3;

/// Runs `work(start, count)` repeatedly for about `budget`; returns attempts/s.
fn rate(budget: Duration, batch: u64, mut work: impl FnMut(u64, u64)) -> f64 {
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed() < budget {
        work(1_000_000_000 + done, batch);
        done += batch;
    }
    done as f64 / started.elapsed().as_secs_f64()
}

fn naive(start: u64, count: u64) {
    for nonce in start..start + count {
        let digest = Sha256::digest(format!("{INDEX}:{PREV}:{nonce}").as_bytes());
        black_box(digest);
    }
}

fn cloned_midstate(prefix: &Sha256, start: u64, count: u64) {
    let mut buf = itoa_buf();
    for nonce in start..start + count {
        let mut hasher = prefix.clone();
        hasher.update(write_decimal(&mut buf, nonce));
        black_box(hasher.finalize());
    }
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

fn write_decimal(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

fn on_threads(threads: u64, start: u64, count: u64, template: &BlockTemplate, engine: Engine) {
    let share = count / threads;
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || hash_range(template, start + t * share, share, engine));
        }
    });
}

/// SHA-256 compressions per second of `openssl speed` on 16 KiB inputs.
fn openssl_compressions_per_second() -> Option<f64> {
    let output = Command::new("openssl")
        .args(["speed", "-evp", "sha256", "-bytes", "16384", "-seconds", "2"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    // Last line: "sha256   <kB/s>k" (thousands of bytes per second).
    let line = text.lines().rev().find(|l| l.trim_start().starts_with("sha256"))?;
    let kbps: f64 = line.split_whitespace().last()?.trim_end_matches('k').parse().ok()?;
    Some(kbps * 1000.0 / 64.0)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, budget) =
        if quick { (1, Duration::from_millis(300)) } else { (5, Duration::from_millis(1000)) };
    let template = BlockTemplate::new(INDEX, PREV);
    let mut prefix = Sha256::new();
    prefix.update(format!("{INDEX}:{PREV}:").as_bytes());
    let best = Engine::best();

    type Variant<'a> = (&'a str, Box<dyn FnMut(u64, u64) + 'a>, u64);
    let mut variants: Vec<Variant> = vec![
        ("naive format+digest, 1 thread", Box::new(naive), 1 << 14),
        ("cloned midstate hasher, 1 thread", Box::new(|s, c| cloned_midstate(&prefix, s, c)), 1 << 15),
        (
            "sha2 compress256 on prepared block, 1 thread",
            Box::new(|s, c| hash_range(&template, s, c, Engine::Portable)),
            1 << 16,
        ),
        (best.name(), Box::new(|s, c| hash_range(&template, s, c, best)), 1 << 16),
        ("best engine, 2 threads", Box::new(|s, c| on_threads(2, s, c, &template, best)), 1 << 22),
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (i, (_, work, batch)) in variants.iter_mut().enumerate() {
            results[i].push(rate(budget, *batch, work));
        }
    }
    let medians: Vec<f64> = results.into_iter().map(median).collect();
    let naive_rate = medians[0];
    println!("engine detected: {}; {rounds} rounds of {budget:?} per variant, median shown", best.name());
    println!("{:<48} {:>14} {:>10}", "variant", "M attempts/s", "x naive");
    for ((name, _, _), rate) in variants.iter().zip(&medians) {
        let label =
            if *name == best.name() { format!("{name} (best engine), 1 thread") } else { name.to_string() };
        println!("{label:<48} {:>14.2} {:>10.2}", rate / 1e6, rate / naive_rate);
    }
    println!("2 threads / 1 thread (best engine): {:.2}x", medians[4] / medians[3]);

    // The real search (chunk claiming, early stop) on a known block:
    // block 1 at difficulty 24 wins at nonce 35,154,319.
    let genesis = BlockTemplate::new(1, "GENESIS");
    for threads in [1usize, 2] {
        let started = Instant::now();
        let found = miner::search::search(&genesis, if quick { 20 } else { 24 }, threads, best).unwrap();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "full search, {threads} thread(s): nonce {} in {:.3} s = {:.2} M attempts/s",
            found.nonce,
            secs,
            (found.nonce + 1) as f64 / secs / 1e6
        );
    }
    match openssl_compressions_per_second() {
        Some(rate) => {
            println!("openssl speed -evp sha256 (16 KiB inputs): {:.2} M compressions/s", rate / 1e6)
        }
        None => println!("openssl speed: not available"),
    }
}

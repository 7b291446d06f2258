//! The `miner` binary as users and the operator run it.

use std::process::{Command, Output};

use serde_json::Value;

fn miner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_miner")).args(args).output().expect("runs miner")
}

fn stdout_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect()
}

/// Blocks computed by the independent Python (hashlib) implementation.
fn reference_chain(blocks: u32, difficulty: u32) -> Vec<Value> {
    let script = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), std::path::PathBuf::from)
        .join("tests/reference_miner.py");
    let output = Command::new("python3")
        .arg(script)
        .args([blocks.to_string(), difficulty.to_string()])
        .output()
        .expect("python3 runs the reference miner");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    stdout_lines(&output)
}

fn without_elapsed(mut block: Value) -> Value {
    let elapsed = block.as_object_mut().unwrap().remove("elapsed_ms");
    assert!(elapsed.is_some_and(|e| e.is_u64()), "elapsed_ms is reported");
    block
}

#[test]
fn chain_of_four_at_difficulty_16_equals_the_python_reference() {
    let output = miner(&["chain", "--blocks", "4", "--difficulty", "16"]);
    assert!(output.status.success());
    let mined: Vec<Value> = stdout_lines(&output).into_iter().map(without_elapsed).collect();
    assert_eq!(mined, reference_chain(4, 16));
}

#[test]
fn one_thread_and_many_threads_mine_the_same_chain() {
    let one = miner(&["chain", "--blocks", "3", "--difficulty", "18", "--threads", "1"]);
    let many = miner(&["chain", "--blocks", "3", "--difficulty", "18", "--threads", "5"]);
    let strip = |o: &Output| stdout_lines(o).into_iter().map(without_elapsed).collect::<Vec<_>>();
    assert_eq!(strip(&one), strip(&many));
    assert_eq!(strip(&one).len(), 3);
}

#[test]
fn mine_prints_one_line_and_writes_the_same_document_to_the_result_file() {
    let dir = std::env::temp_dir().join(format!("miner-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("termination-log");
    let output = miner(&[
        "mine",
        "--index",
        "1",
        "--prev",
        "GENESIS",
        "--difficulty",
        "12",
        "--result-file",
        file.to_str().unwrap(),
    ]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1);
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written.trim(), stdout.trim());
    let result = mining_api::BlockResult::from_json(&written).unwrap();
    assert_eq!(miner::verify_result(&result, 1, "GENESIS", 12), Ok(()));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_unwritable_result_file_warns_and_still_succeeds() {
    let output = miner(&[
        "mine",
        "--index",
        "1",
        "--prev",
        "GENESIS",
        "--difficulty",
        "4",
        "--result-file",
        "/nonexistent-dir/termination-log",
    ]);
    assert!(output.status.success());
    assert_eq!(stdout_lines(&output).len(), 1);
    assert!(String::from_utf8_lossy(&output.stderr).contains("warning: could not write result"));
}

#[test]
fn verify_accepts_a_mined_block_and_rejects_tampering() {
    let block = &reference_chain(2, 12)[1];
    let prev = block["prev"].as_str().unwrap();
    let nonce = block["nonce"].as_u64().unwrap();
    let hash = block["hash"].as_str().unwrap();

    let ok = miner(&[
        "verify",
        "--index",
        "2",
        "--prev",
        prev,
        "--nonce",
        &nonce.to_string(),
        "--difficulty",
        "12",
    ]);
    assert!(ok.status.success());
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), hash);

    let other_prev = "F".repeat(64);
    let tampered: [[&str; 4]; 4] = [
        ["2", prev, &(nonce + 1).to_string(), "12"],
        ["2", &other_prev, &nonce.to_string(), "12"],
        ["3", prev, &nonce.to_string(), "12"],
        ["2", prev, &nonce.to_string(), "40"],
    ];
    for [index, prev, nonce, difficulty] in tampered {
        let output = miner(&[
            "verify",
            "--index",
            index,
            "--prev",
            prev,
            "--nonce",
            nonce,
            "--difficulty",
            difficulty,
        ]);
        assert_eq!(
            output.status.code(),
            Some(1),
            "index {index} prev {prev} nonce {nonce} difficulty {difficulty}"
        );
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn bad_input_exits_2_with_one_line_on_stderr_and_nothing_on_stdout() {
    let cases: &[&[&str]] = &[
        &["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "0"],
        &["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "257"],
        &["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "ten"],
        &["mine", "--index", "0", "--prev", "GENESIS", "--difficulty", "8"],
        &["mine", "--index", "x", "--prev", "GENESIS", "--difficulty", "8"],
        &["mine", "--index", "1", "--prev", "genesis", "--difficulty", "8"],
        &["mine", "--index", "2", "--prev", "ABCD", "--difficulty", "8"],
        &["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "8", "--threads", "0"],
        &["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "8", "--threads", "two"],
        &["chain", "--blocks", "0", "--difficulty", "8"],
        &["chain", "--blocks", "-1", "--difficulty", "8"],
        &["verify", "--index", "1", "--prev", "GENESIS", "--nonce", "abc", "--difficulty", "8"],
        &["mine", "--prev", "GENESIS", "--difficulty", "8"],
        &["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "8", "--count", "0"],
        &["mine", "--index", "1", "--prev", "GENESIS", "--difficulty", "8", "--start", "-5"],
        &[
            "mine",
            "--index",
            "1",
            "--prev",
            "GENESIS",
            "--difficulty",
            "8",
            "--start",
            "18446744073709551616",
        ],
        &["dig"],
    ];
    for args in cases {
        let output = miner(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("miner: "), "{args:?}: {stderr}");
    }
}

/// A block cut into ranges: the range below the reference answer reports no
/// winner (naming exactly what it searched), the range starting at it finds
/// it, and the range after it finds a later winner, never the same one.
#[test]
fn mining_in_ranges_agrees_with_the_python_reference() {
    let reference = &reference_chain(2, 12)[1];
    let (prev, nonce) = (reference["prev"].as_str().unwrap(), reference["nonce"].as_u64().unwrap());
    assert!(nonce > 0, "the reference block needs nonces below its answer");
    let mine = |start: u64, count: u64| {
        let (start, count) = (start.to_string(), count.to_string());
        let args = [
            "mine",
            "--index",
            "2",
            "--prev",
            prev,
            "--difficulty",
            "12",
            "--start",
            &start,
            "--count",
            &count,
        ];
        let output = miner(&[&args[..], &["--threads", "3", "--result-file", "/dev/null"]].concat());
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let mut lines = stdout_lines(&output);
        assert_eq!(lines.len(), 1);
        without_elapsed(lines.remove(0))
    };
    let below = mine(0, nonce);
    let expected_none = serde_json::json!({
        "index": 2, "prev": prev, "difficulty": 12, "start": 0, "count": nonce,
    });
    assert_eq!(below, expected_none);
    assert_eq!(&mine(nonce / 2, nonce - nonce / 2 + 1), reference);
    let after = mine(nonce + 1, 1 << 30);
    assert!(after["nonce"].as_u64().unwrap() > nonce, "{after}");
}

//! README's "Run the components yourself", run as printed: its three `sh`
//! blocks are taken from README.md itself and pasted, in order, into three
//! shells against the tests' local cluster: the operator (in the background,
//! as the block starts it) mines a `MiningWorkflow` applied with kubectl, the
//! frontend runs in the foreground of a second shell, and the official Python
//! SDK in a third mines a chain through it. A README that drifts from the code
//! (a port, a flag, a path, a file name) fails here.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster_tests::{as_a_user, reference_chain, repo_root};

const SECTION: &str = "## Run the components yourself";

/// The fenced `sh` blocks of README's section `heading`, in order.
fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let section: Vec<&str> = readme
        .lines()
        .skip_while(|line| *line != heading)
        .skip(1)
        .take_while(|line| !line.starts_with("## "))
        .collect();
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in section {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(block), "```") => {
                blocks.push(block.join("\n"));
                current = None;
            }
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    blocks
}

/// A user's shell: no test-runner variables, no KUBECONFIG (the blocks export
/// their own), and the target directory and cluster slot the suite built and
/// started, so `cargo run` and `cluster.sh` find what is already there.
fn user_shell(script: &str, log: &Path) -> Command {
    let mut command = Command::new("bash");
    as_a_user(command.args(["-euo", "pipefail", "-c", script]).current_dir(repo_root()));
    // Files, not pipes: a background process the block starts keeps its
    // stdout open long after the shell is gone.
    let out = File::create(log).expect("a log file");
    command.stdout(out.try_clone().unwrap()).stderr(out).stdin(Stdio::null());
    // A process group of its own, so the operator `&` left behind and the
    // frontend `cargo run` started go with one signal.
    command.process_group(0);
    command
}

/// Whatever the blocks started and left behind goes, even when an assertion
/// fails: both process groups, the workflows in `default`, the key file.
struct Leftovers {
    groups: Vec<u32>,
    children: Vec<Child>,
    dir: PathBuf,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for group in &self.groups {
            let _ = Command::new("kill").args(["-TERM", "--", &format!("-{group}")]).status();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        let kubeconfig =
            Command::new(repo_root().join("tests/cluster/cluster.sh")).arg("kubeconfig").output();
        if let Ok(path) = kubeconfig {
            let path = String::from_utf8_lossy(&path.stdout).trim().to_string();
            let _ = Command::new("kubectl")
                .args(["delete", "miningworkflows", "--all", "--namespace", "default", "--wait=false"])
                .env("KUBECONFIG", path)
                .status();
        }
        let _ = std::fs::remove_file(repo_root().join("ownership.key"));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `Leftovers` goes on `Drop`, which a test killed at its timeout never
/// runs; and nextest signals only the test's own process group, not the
/// groups the blocks run in. So each such group gets a watcher of its own,
/// inside it: when this test process is gone, it signals its whole group
/// (itself included). On a normal end `Leftovers` ends it with the group.
fn reaped_if_this_test_dies(group: u32) {
    let watcher = "while kill -0 \"$0\" 2>/dev/null; do sleep 1; done; kill -TERM 0";
    let spawned = Command::new("sh")
        .args(["-c", watcher, &std::process::id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(group as i32)
        .spawn();
    // Not reaping stays a leak after a timeout only; the test itself goes on.
    if let Err(err) = spawned {
        eprintln!("no watcher for process group {group}: {err}");
    }
}

/// README's blocks bind the operator's 8081 and the frontend's 8080 and
/// 9090 as printed. Something else holding one would fail a block with less
/// said; `make demo` left running holds 8080 (its forwarder) and 8081 (its
/// operator Pod, on this host's network), and tests/run.sh stops it first.
fn ports_are_free_as_printed() {
    for address in ["0.0.0.0:8081", "0.0.0.0:8080", "0.0.0.0:9090"] {
        if let Err(err) = std::net::TcpListener::bind(address) {
            panic!(
                "{address} is taken ({err}), and README's blocks bind it as printed: \
                 `make demo-down` stops make demo's forwarder and Pods (they hold 8080 and 8081); \
                 otherwise `ss -ltnp` names what holds it"
            );
        }
    }
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[test]
fn readme_has_the_three_blocks_this_test_runs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = sh_blocks(&readme, SECTION);
    assert_eq!(blocks.len(), 3, "the operator, the frontend, a client: {blocks:#?}");
    assert!(blocks[0].contains("--bin operator") && blocks[0].contains("kubectl wait"), "{}", blocks[0]);
    assert!(
        blocks[1].lines().last().unwrap().contains("-p mcp-frontend"),
        "the frontend last, in the foreground"
    );
    assert!(blocks[2].contains("demo/client.py"), "{}", blocks[2]);
}

/// Every host configuration README prints (VS Code, Claude Code, Cursor,
/// Claude Desktop) is JSON a host can load, keeps no token in the file, and
/// runs `npx` without a prompt.
#[test]
fn readme_host_configurations_are_json_without_a_token() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks: Vec<&str> =
        readme.split("```json\n").skip(1).map(|rest| &rest[..rest.find("```").unwrap()]).collect();
    assert!(blocks.len() >= 4, "the host snippets: {blocks:#?}");
    for block in blocks {
        let parsed: serde_json::Value =
            serde_json::from_str(block).unwrap_or_else(|e| panic!("not JSON ({e}):\n{block}"));
        let text = parsed.to_string();
        assert!(!text.contains("\"env\""), "no token written into a config file:\n{block}");
        if text.contains("\"npx\"") {
            assert!(text.contains("\"-y\""), "npx must not stop to ask:\n{block}");
        }
    }
}

#[ignore = "runs README's commands on the local cluster; tests/run.sh runs it there"]
#[test]
fn readme_run_the_components_yourself_works_as_printed() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = sh_blocks(&readme, SECTION);
    assert_eq!(blocks.len(), 3, "{blocks:#?}");
    ports_are_free_as_printed();
    let dir = std::env::temp_dir().join(format!("readme-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut leftovers = Leftovers { groups: Vec::new(), children: Vec::new(), dir: dir.clone() };

    // The first shell: the cluster (already up), the images, the CRD, the
    // operator in the background, a workflow it must mine to Succeeded.
    let operator_log = dir.join("first-shell.log");
    let mut first = user_shell(&blocks[0], &operator_log).spawn().expect("bash runs");
    leftovers.groups.push(first.id());
    reaped_if_this_test_dies(first.id());
    let status = first.wait().unwrap();
    let first_output = read(&operator_log);
    assert!(status.success(), "the first block failed:\n{}\n{first_output}", blocks[0]);
    let listed = first_output.lines().find(|line| line.starts_with("demo ")).unwrap_or_default();
    assert!(listed.contains("Succeeded"), "`kubectl get mwf demo` says Succeeded:\n{first_output}");

    // The second shell: the frontend in its foreground, until it listens.
    let frontend_log = dir.join("second-shell.log");
    let mut second = user_shell(&blocks[1], &frontend_log).spawn().expect("bash runs");
    leftovers.groups.push(second.id());
    reaped_if_this_test_dies(second.id());
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::net::TcpStream::connect("127.0.0.1:8080").is_err() {
        if let Some(status) = second.try_wait().unwrap() {
            panic!(
                "the second block ended ({status}) before the frontend listened:\n{}",
                read(&frontend_log)
            );
        }
        assert!(Instant::now() < deadline, "the frontend never listened on 8080:\n{}", read(&frontend_log));
        std::thread::sleep(Duration::from_millis(200));
    }
    leftovers.children.push(second);

    // The third shell: the official Python SDK mines and re-checks a chain.
    let client_log = dir.join("third-shell.log");
    let status = user_shell(&blocks[2], &client_log).status().expect("bash runs");
    let client_output = read(&client_log);
    assert!(
        status.success(),
        "the third block failed:\n{client_output}\nthe frontend:\n{}",
        read(&frontend_log)
    );
    assert!(client_output.contains("every hash re-checked by the client"), "{client_output}");
    // demo/client.py's default of 4 blocks, at the block's difficulty 16.
    for block in reference_chain(4, 16) {
        let (index, nonce) = (block["index"].as_u64().unwrap(), block["nonce"].as_u64().unwrap());
        let line = format!("{index:>5}  {nonce:>10}  {}", block["hash"].as_str().unwrap());
        assert!(client_output.contains(&line), "missing {line:?} in:\n{client_output}");
    }
    eprintln!(
        "first shell:\n{first_output}\nsecond shell:\n{}\nthird shell:\n{client_output}",
        read(&frontend_log)
    );
    drop(leftovers);
    assert!(!repo_root().join("ownership.key").exists(), "the key the test wrote is gone");
}

/// README stays one screen of commands and at most 300 lines (detail lives
/// in docs/), with both of its commands — the one that runs the whole thing
/// and the one that runs the tests — on its first screen, and the test
/// command is the one CI runs.
#[test]
fn readme_is_at_most_300_lines_with_both_commands_on_its_first_screen() {
    let root = cluster_tests::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines: move detail to docs/");
    let first_screen: String = readme.lines().take(30).collect::<Vec<_>>().join("\n");
    for command in ["`make demo`", "`tests/run.sh`"] {
        assert!(first_screen.contains(command), "README's first 30 lines lack {command}");
    }
    let test_block = sh_blocks(&readme, "## Test it");
    assert_eq!(test_block.first().map(|b| b.trim()), Some("tests/run.sh"), "{test_block:?}");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(ci.lines().any(|line| line.trim() == "exec tests/run.sh"), "CI runs README's test command");
}

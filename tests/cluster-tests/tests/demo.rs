//! README's main command, `make demo`, against the local cluster the tests
//! already run: it installs the chart, mines through the installed frontend
//! and prints the chain and the `kubectl get miningworkflows` line.

use std::process::Command;

use cluster_tests::helm::{helm, run};
use cluster_tests::{TestNamespace, is_local_cluster, reference_chain, repo_root};

#[tokio::test]
async fn make_demo_mines_a_chain_through_the_installed_frontend() {
    if !is_local_cluster() {
        eprintln!("skipped: the demo runs on the local cluster");
        return;
    }
    // A namespace and release of its own, so it runs beside the other tests.
    let ns = TestNamespace::new("demo").await;
    let release = format!("d{}", &ns.name[ns.name.len() - 5..]);
    let output = Command::new("make")
        .arg("demo")
        .current_dir(repo_root())
        .env("DEMO_NAMESPACE", &ns.name)
        .env("DEMO_RELEASE", &release)
        .env("DEMO_DIFFICULTY", "10")
        .env("DEMO_BLOCKS", "3")
        // tests/run.sh ran the demo's own build command just before. Run
        // again from inside a test process, cargo sees a different
        // environment and rebuilds the release profile from scratch
        // (minutes), so the test skips that one step.
        .env("DEMO_SKIP_BUILD", "1")
        .output()
        .expect("make runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The demo leaves its release running for a look around; this one goes.
    let (_, uninstalled) = run(&helm(), &["uninstall", &release, "--namespace", &ns.name, "--wait"]);
    assert!(output.status.success(), "make demo failed:\n{stdout}\n{stderr}");
    // The chain it printed is the independent implementation's.
    for block in reference_chain(3, 10) {
        let (index, nonce) = (block["index"].as_u64().unwrap(), block["nonce"].as_u64().unwrap());
        let line = format!("{index:>5}  {nonce:>10}  {}", block["hash"].as_str().unwrap());
        assert!(stdout.contains(&line), "missing {line:?} in:\n{stdout}");
    }
    assert!(stdout.contains("every hash re-checked by the client"), "{stdout}");
    assert!(stdout.contains("progress 3/3"), "progress was shown: {stdout}");
    let listed = stdout.lines().find(|l| l.starts_with("mw-")).unwrap_or_default();
    assert!(listed.contains("Succeeded") && listed.contains("3/3"), "the kubectl get line: {stdout}");
    assert!(uninstalled.contains("uninstalled"), "{uninstalled}");
    ns.delete().await;
}

//! Every release-qualified name README and docs/ print — a role to bind, a
//! Service to forward, a Deployment to watch — is one the chart renders for
//! the release they name (README's `helm install mining … -n mining`), and
//! the install's NOTES print the tool author's binding with that name. A doc
//! that types a name the chart does not make (`mining-tool-author`) fails here.

use std::collections::BTreeSet;

use super::*;

/// `helm install mining --dry-run=client` in namespace `mining`, as README
/// installs it: the manifests and NOTES, as one text.
fn readme_install(helm: &str) -> String {
    let output = Command::new(helm)
        .args(["install", "mining", &chart(), "--namespace", "mining", "--dry-run=client"])
        .args(THROWAWAY_KEY)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).to_string()
}

/// Each `name:` the rendering gives an object.
fn rendered_names(rendering: &str) -> BTreeSet<String> {
    rendering
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("name: "))
        .map(|name| name.trim().trim_matches('"').to_string())
        .collect()
}

/// The release-qualified names `text` prints: `mining-mining-operator-X` as
/// README's release names it, `RELEASE-mining-operator-X` for any release
/// (taken for README's), and placeholders no release renders.
fn printed_names(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut names = BTreeSet::new();
    let mut placeholders = Vec::new();
    for (prefix, replacement) in [
        ("mining-mining-operator-", "mining-mining-operator-"),
        ("RELEASE-mining-operator-", "mining-mining-operator-"),
    ] {
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            let suffix: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            let suffix = suffix.trim_end_matches('-');
            if !suffix.is_empty() {
                names.insert(format!("{replacement}{suffix}"));
            }
        }
    }
    for placeholder in ["<release>-", "`-tool-author`", "mining-tool-author"] {
        if text.contains(placeholder) {
            placeholders.push(placeholder.to_string());
        }
    }
    (names, placeholders)
}

#[test]
fn every_name_the_docs_print_is_one_the_chart_renders_for_the_release_they_name() {
    let rendering = readme_install(&helm());
    let rendered = rendered_names(&rendering);
    let root = cluster_tests::repo_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut checked = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let (names, placeholders) = printed_names(&text);
        assert!(
            placeholders.is_empty(),
            "{} prints names no release renders: {placeholders:?}",
            file.display()
        );
        for name in names {
            assert!(
                rendered.contains(&name),
                "{} prints {name}, which the chart does not render for release mining",
                file.display()
            );
            checked.insert(name);
        }
    }
    for needed in [
        "mining-mining-operator-tool-author",
        "mining-mining-operator-mcp-caller",
        "mining-mining-operator-frontend",
    ] {
        assert!(
            checked.contains(needed),
            "the docs no longer print {needed}: is this test still reading them?"
        );
    }
    // README's namespaces are the chart's defaults for namespace `mining`.
    for namespace in ["mining-workflows", "mining-callers"] {
        assert!(rendered.contains(namespace), "the chart does not make {namespace}");
    }
    // NOTES: how to let an author define tools, with the role the chart made.
    let notes = &rendering[rendering.find("NOTES:").expect("NOTES")..];
    let bind = notes
        .lines()
        .find(|line| line.contains("--clusterrole=mining-mining-operator-tool-author"))
        .expect("NOTES bind a tool author");
    assert!(bind.contains("kubectl -n mining-workflows create rolebinding"), "{bind}");
    assert!(notes.contains("--clusterrole=mining-mining-operator-tool-debugger"), "{notes}");
    assert!(notes.contains("docs/TOOLS.md"), "{notes}");
}

#[test]
fn the_tool_debugger_reads_pods_logs_and_jobs_but_no_runs_or_secrets() {
    let manifests = render(&helm(), "default", &[]);
    let debugger = manifests
        .split("\n---\n")
        .find(|d| d.contains("name: release-mining-operator-tool-debugger\n"))
        .expect("a tool-debugger ClusterRole");
    for granted in ["\"pods/log\"", "\"jobs\"", "\"mcptools\""] {
        assert!(debugger.contains(granted), "{debugger}");
    }
    for never in ["toolruns", "secrets", "miningworkflows", "create", "delete", "aggregate-to"] {
        assert!(!debugger.contains(never), "{never}: {debugger}");
    }
}

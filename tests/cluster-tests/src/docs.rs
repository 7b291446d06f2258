//! Command and file blocks taken from the docs themselves, so that a test
//! runs what a reader copies and a doc that drifts from the code fails.

use mining_api::McpTool;

use crate::repo_root;

/// The fenced blocks of `language` in the section `heading` (a whole
/// `## …` line) of `file` (relative to the repository), in order.
pub fn blocks(file: &str, heading: &str, language: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap_or_else(|err| panic!("{file}: {err}"));
    let start = text.find(&format!("{heading}\n")).unwrap_or_else(|| panic!("{file} has no {heading:?}"));
    let section = &text[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let fence = format!("```{language}\n");
    section
        .split(&fence)
        .skip(1)
        .map(|rest| rest[..rest.find("```").expect("a closed block")].to_string())
        .collect()
}

/// An McpTool document as kubectl reads it (YAML, as users apply it).
pub fn mcp_tool_from_yaml(yaml: &str) -> McpTool {
    let output = crate::kubectl_with_input(&["create", "--dry-run=client", "-o", "json", "-f", "-"], yaml);
    assert!(
        output.status.success(),
        "kubectl reads the documented YAML: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut tool: McpTool = serde_json::from_slice(&output.stdout).unwrap();
    // kubectl fills in its context's namespace where the document names
    // none; the tests create it in theirs.
    tool.metadata.namespace = None;
    tool
}

/// Every fenced block of `language` in `file`, whatever its section.
pub fn all_blocks(file: &str, language: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap_or_else(|err| panic!("{file}: {err}"));
    let fence = format!("```{language}\n");
    text.split(&fence)
        .skip(1)
        .map(|rest| rest[..rest.find("```").expect("a closed block")].to_string())
        .collect()
}

/// The base image docs/TOOLS.md's first tool builds `FROM`, made once from
/// this machine's own Python (the interpreter, the libraries it links and
/// its standard library) in podman's store under the name the docs pull,
/// since this machine reaches no image registry. Only a stand-in for the
/// registry: the docs' commands run unchanged against it.
pub fn stand_in_python_base_image() {
    const NAME: &str = "docker.io/library/python:3.12-slim";
    let exists = std::process::Command::new("podman").args(["image", "exists", NAME]).status().unwrap();
    if exists.success() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("python-base-{}", std::process::id()));
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::create_dir_all(root.join("usr/lib")).unwrap();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    let interpreter = std::fs::canonicalize("/usr/bin/python3").unwrap();
    std::fs::copy(&interpreter, root.join("usr/bin/python3")).unwrap();
    let ldd = std::process::Command::new("ldd").arg(&interpreter).output().unwrap();
    for library in String::from_utf8_lossy(&ldd.stdout).split_whitespace().filter(|w| w.starts_with('/')) {
        let target = root.join(library.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(library, target).unwrap();
    }
    let version = interpreter.file_name().unwrap().to_string_lossy().to_string();
    let copied = std::process::Command::new("sh")
        .arg("-ec")
        .arg(format!(
            "tar -C /usr/lib --exclude={version}/test --exclude={version}/site-packages --exclude={version}/dist-packages \
             --exclude=__pycache__ -cf - {version} | tar -C {} -xf -",
            root.join("usr/lib").display()
        ))
        .status()
        .unwrap();
    assert!(copied.success(), "copying the standard library");
    std::fs::write(
        dir.join("Containerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/local/bin:/usr/bin:/bin\n",
    )
    .unwrap();
    let built =
        std::process::Command::new("podman").args(["build", "-q", "-t", NAME]).arg(&dir).output().unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let _ = std::fs::remove_dir_all(dir);
}

//! Writes the MiningWorkflow CRD generated from the Rust types into `crds/`
//! and the Helm chart's `files/` (or prints it with `--stdout`).

fn main() -> std::io::Result<()> {
    let yaml = mining_api::crd_yaml();
    if std::env::args().any(|a| a == "--stdout") {
        print!("{yaml}");
        return Ok(());
    }
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), std::path::PathBuf::from)
        .join("..");
    for relative in [mining_api::CRD_PATH, mining_api::CHART_CRD_PATH] {
        std::fs::write(root.join(relative), &yaml)?;
        eprintln!("wrote {relative}");
    }
    Ok(())
}

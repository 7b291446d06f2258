//! Writes the MiningWorkflow CRD generated from the Rust types into `crds/`
//! (or prints it with `--stdout`).

fn main() -> std::io::Result<()> {
    let yaml = mining_api::crd_yaml();
    if std::env::args().any(|a| a == "--stdout") {
        print!("{yaml}");
        return Ok(());
    }
    let path = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), std::path::PathBuf::from)
        .join("../..")
        .join(mining_api::CRD_PATH);
    std::fs::write(&path, yaml)?;
    eprintln!("wrote {}", mining_api::CRD_PATH);
    Ok(())
}

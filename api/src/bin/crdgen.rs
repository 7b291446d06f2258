//! Writes the CRDs generated from the Rust types into `crds/` and the Helm
//! chart's `files/` (or prints them with `--stdout`).

fn main() -> std::io::Result<()> {
    let files = mining_api::crd_files();
    if std::env::args().any(|a| a == "--stdout") {
        for file in &files {
            print!("---\n{}", file.yaml());
        }
        return Ok(());
    }
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), std::path::PathBuf::from)
        .join("..");
    for file in &files {
        for relative in [file.path, file.chart_path] {
            std::fs::write(root.join(relative), file.yaml())?;
            eprintln!("wrote {relative}");
        }
    }
    Ok(())
}

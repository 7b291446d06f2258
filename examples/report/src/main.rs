//! The example tool that hands over files (`McpTool` `report`): from
//! `MCP_TOOL_ARGUMENTS` `{"rows": N}` it makes `data.csv` (`n,value` for
//! n = 1..=N, value = n² mod 1,000,003) and `chart.svg` (the first 200
//! values as a line), uploads both to `$MCP_OUTPUTS_URL/NAME` with
//! `$MCP_OUTPUTS_TOKEN` — the two lines any tool needs — and writes a small
//! JSON summary to `/dev/termination-log`. The caller gets each file as an
//! MCP resource link.

use serde_json::{Value, json};

const TERMINATION_LOG: &str = "/dev/termination-log";
/// Most rows made, whatever is asked (~100 MiB of CSV).
pub const MAX_ROWS: u64 = 8_000_000;
const MODULUS: u64 = 1_000_003;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("report {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let (text, code) = match run(&std::env::var("MCP_TOOL_ARGUMENTS").unwrap_or_default()) {
        Ok(result) => (result.to_string(), 0),
        Err(message) => (message, 3),
    };
    println!("{text}");
    let _ = std::fs::write(TERMINATION_LOG, &text);
    std::process::exit(code);
}

fn run(arguments: &str) -> Result<Value, String> {
    let arguments: Value =
        serde_json::from_str(arguments).map_err(|err| format!("MCP_TOOL_ARGUMENTS is not JSON: {err}"))?;
    let rows = arguments.get("rows").and_then(Value::as_u64).unwrap_or(1000).clamp(1, MAX_ROWS);
    println!("MCP_PROGRESS writing {rows} rows");
    let csv = csv(rows);
    let svg = svg(rows.min(200));
    upload("data.csv", "text/csv", csv.as_bytes())?;
    upload("chart.svg", "image/svg+xml", svg.as_bytes())?;
    Ok(json!({"rows": rows, "files": ["data.csv", "chart.svg"], "csv_bytes": csv.len()}))
}

fn value(n: u64) -> u64 {
    n * n % MODULUS
}

/// `n,value` lines under a header.
pub fn csv(rows: u64) -> String {
    let mut text = String::with_capacity(rows as usize * 16 + 8);
    text.push_str("n,value\n");
    for n in 1..=rows {
        text.push_str(&format!("{n},{}\n", value(n)));
    }
    text
}

/// The first `points` values as an SVG polyline, 400×200.
fn svg(points: u64) -> String {
    let line: Vec<String> = (1..=points)
        .map(|n| {
            format!(
                "{:.1},{:.1}",
                n as f64 * 400.0 / points as f64,
                200.0 - value(n) as f64 * 200.0 / MODULUS as f64
            )
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"200\" viewBox=\"0 0 400 200\">\
         <polyline fill=\"none\" stroke=\"#1f77b4\" points=\"{}\"/></svg>\n",
        line.join(" ")
    )
}

/// The two lines every tool needs: PUT the bytes to `$MCP_OUTPUTS_URL/NAME`
/// with `Authorization: Bearer $MCP_OUTPUTS_TOKEN`.
fn upload(name: &str, media_type: &str, bytes: &[u8]) -> Result<(), String> {
    let (Ok(base), Ok(token)) = (std::env::var("MCP_OUTPUTS_URL"), std::env::var("MCP_OUTPUTS_TOKEN")) else {
        return Err(
            "no MCP_OUTPUTS_URL: this install keeps no files (the operator has no --outputs-store)".into()
        );
    };
    ureq::put(&format!("{base}/{name}"))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", media_type)
        .send(bytes)
        .map_err(|err| format!("uploading {name}: {err}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csv_is_n_and_n_squared_mod_a_prime() {
        assert_eq!(csv(3), "n,value\n1,1\n2,4\n3,9\n");
        assert!(csv(2000).ends_with(&format!("2000,{}\n", 4_000_000 % MODULUS)));
    }

    #[test]
    fn without_an_outputs_url_the_tool_says_why() {
        // SAFETY: tests of this crate touch no other environment variable.
        unsafe { std::env::remove_var("MCP_OUTPUTS_URL") };
        assert!(run(r#"{"rows": 2}"#).unwrap_err().contains("keeps no files"));
    }
}

//! `validate`: the frontend's verdict on McpTool definitions, before they
//! are applied (pure: a file's text in, one verdict per document out).

use mining_api::McpTool;
use serde::Deserialize as _;

/// The longest verdict the frontend writes into a tool's `Accepted`
/// condition; the CLI clips the same way so the two read alike.
const MAX_VERDICT_BYTES: usize = 1024;

/// One document's verdict: what it is called and why it cannot be offered.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    /// `mcptool/NAME`, or `document N` when it has no usable name.
    pub what: String,
    pub problem: Option<String>,
}

/// The verdict on each document of `text` (YAML or JSON, `---`-separated).
/// Documents of other kinds are named and refused: this checks McpTools.
pub fn verdicts(text: &str) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let what = format!("document {}", index + 1);
        let value = match serde_json::Value::deserialize(document) {
            Ok(serde_json::Value::Null) => continue,
            Ok(value) => value,
            Err(err) => {
                out.push(Verdict { what, problem: Some(format!("not YAML or JSON: {err}")) });
                // The parser cannot find the next document after a syntax error.
                break;
            }
        };
        out.push(verdict(what, value));
    }
    out
}

fn verdict(what: String, value: serde_json::Value) -> Verdict {
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
    let api_version = value.get("apiVersion").and_then(|v| v.as_str()).unwrap_or_default();
    let expected = format!("{}/v1alpha1", mining_api::GROUP);
    if kind != "McpTool" || api_version != expected {
        return Verdict {
            what,
            problem: Some(format!("not an McpTool (apiVersion {expected}, kind McpTool)")),
        };
    }
    let name = value.pointer("/metadata/name").and_then(|n| n.as_str()).map(str::to_string);
    let what = name.as_ref().map_or(what, |name| format!("mcptool/{name}"));
    let Some(name) = name else {
        return Verdict { what, problem: Some("metadata.name is required".into()) };
    };
    let tool: McpTool = match serde_json::from_value(value) {
        Ok(tool) => tool,
        Err(err) => return Verdict { what, problem: Some(format!("not a valid McpTool: {err}")) },
    };
    let problem = mining_api::tool_schema::offerable(&name, &tool.spec)
        .err()
        .map(|why| mining_api::pow::clip(&why, MAX_VERDICT_BYTES).to_string());
    Verdict { what, problem }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: mining-operator.dev/v1alpha1
kind: McpTool
metadata: {name: sum-numbers}
spec:
  description: Adds numbers.
  inputSchema: {type: object}
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: tool, image: example/sum}]
"#;

    #[test]
    fn each_document_gets_the_frontends_verdict() {
        let broken = GOOD.replace("sum-numbers", "start_mining").replace("{type: object}", "{type: array}");
        let text =
            format!("{GOOD}---\n{broken}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\n");
        let got = verdicts(&text);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], Verdict { what: "mcptool/sum-numbers".into(), problem: None });
        assert_eq!(
            got[1].problem.as_deref(),
            Some("start_mining is the name of one of the frontend's own tools"),
            "the reserved name is found first, as the frontend finds it"
        );
        assert!(got[2].problem.as_deref().unwrap().starts_with("not an McpTool"), "{got:?}");
    }

    #[test]
    fn a_definition_the_api_would_refuse_is_named_with_why() {
        let missing = GOOD.replace("  description: Adds numbers.\n", "");
        let got = verdicts(&missing);
        assert!(got[0].problem.as_deref().unwrap().contains("description"), "{got:?}");
        let got = verdicts("{not yaml");
        assert_eq!(got.len(), 1);
        assert!(got[0].problem.as_deref().unwrap().starts_with("not YAML or JSON"), "{got:?}");
        assert!(verdicts("").is_empty());
    }
}

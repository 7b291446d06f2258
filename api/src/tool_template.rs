//! A tool's Job template as the tool boundary sees it (pure): what the
//! kubelet would make of a value, which templates are refused, and how a
//! template that is not a Job template at all fails only its own object.
//!
//! The kubelet expands `$(NAME)` in `command`, `args` and every `env` value
//! with the variables defined before it, and turns `$$` into `$`. A caller's
//! arguments are data: they reach the container from a Secret (never
//! expanded), and no template may put the arguments' variable into a
//! command line ([`template_problem`]), where a shell would run what a
//! caller wrote.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Deserializer};

/// The environment variable holding a run's arguments (one JSON document).
pub const ARGUMENTS_ENV: &str = "MCP_TOOL_ARGUMENTS";

/// On a template that did not parse as a Job template: why (the object still
/// deserialises, so one ill-typed `McpTool` or `ToolRun` fails only itself).
pub const INVALID_TEMPLATE: &str = "mining-operator.dev/invalid-template";
/// Longest reason kept for [`INVALID_TEMPLATE`].
const MAX_INVALID_REASON_BYTES: usize = 256;

/// The variable names `text` references as the kubelet reads it: `$(NAME)`
/// not escaped by a preceding `$`.
pub fn kubelet_references(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix('$') {
            rest = escaped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(close) = inner.find(')')
        {
            names.push(&inner[..close]);
            rest = &inner[close + 1..];
        } else {
            rest = after;
        }
    }
    names
}

/// Why a template cannot be run as a tool, if it cannot: a container whose
/// `command` or `args` reference the arguments' variable (directly, or
/// through a variable of its own `env` that does) would put a caller's
/// text on a command line.
pub fn template_problem(template: &JobTemplateSpec) -> Option<String> {
    if let Some(why) = template.metadata.as_ref().and_then(|m| m.annotations.as_ref()?.get(INVALID_TEMPLATE))
    {
        return Some(format!("jobTemplate is not a batch/v1 Job template: {why}"));
    }
    let pod = template.spec.as_ref()?.template.spec.as_ref()?;
    pod.init_containers.iter().flatten().chain(&pod.containers).find_map(command_line_problem)
}

fn command_line_problem(container: &Container) -> Option<String> {
    // Variables of the container's own env that carry the arguments on.
    let mut carrying: Vec<&str> = vec![ARGUMENTS_ENV];
    for var in container.env.iter().flatten() {
        let value = var.value.as_deref().unwrap_or_default();
        if kubelet_references(value).iter().any(|name| carrying.contains(name)) {
            carrying.push(&var.name);
        }
    }
    let words = container.command.iter().flatten().chain(container.args.iter().flatten());
    words.flat_map(|word| kubelet_references(word)).find(|name| carrying.contains(name)).map(|name| {
        format!(
            "container {:?} puts $({name}) into its command or args, where a caller's arguments would be \
             run as a command line: read {ARGUMENTS_ENV} from the environment instead",
            container.name
        )
    })
}

/// Deserialises a Job template leniently: a value that is not one (a field
/// of the wrong type, say) becomes an empty template carrying the reason
/// under [`INVALID_TEMPLATE`], so the list it came in still parses.
pub fn lenient_template<'de, D: Deserializer<'de>>(deserializer: D) -> Result<JobTemplateSpec, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_else(|err| invalid_template(&err.to_string())))
}

fn invalid_template(why: &str) -> JobTemplateSpec {
    let why = crate::pow::clip(why, MAX_INVALID_REASON_BYTES).to_string();
    let annotations = BTreeMap::from([(INVALID_TEMPLATE.to_string(), why)]);
    JobTemplateSpec {
        metadata: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            annotations: Some(annotations),
            ..Default::default()
        }),
        spec: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn references_are_found_as_the_kubelet_reads_them() {
        assert_eq!(kubelet_references("a $(X) b $$(Y) $(Z"), ["X"]);
        assert_eq!(kubelet_references("$$$(X)"), ["X"], "an escaped $ then a reference");
        assert!(kubelet_references("plain $ text").is_empty());
    }

    fn template(container: serde_json::Value) -> JobTemplateSpec {
        serde_json::from_value(json!({"spec": {"template": {"spec": {"containers": [container]}}}})).unwrap()
    }

    #[test]
    fn a_command_line_made_of_the_arguments_is_refused() {
        let direct = template(
            json!({"name": "t", "image": "i", "command": ["sh", "-c", "echo $(MCP_TOOL_ARGUMENTS)"]}),
        );
        assert!(template_problem(&direct).unwrap().contains("$(MCP_TOOL_ARGUMENTS)"));
        let through = template(json!({"name": "t", "image": "i", "args": ["$(COPY)"],
            "env": [{"name": "COPY", "value": "x $(MCP_TOOL_ARGUMENTS)"}]}));
        assert!(template_problem(&through).unwrap().contains("$(COPY)"));
        let escaped =
            template(json!({"name": "t", "image": "i", "command": ["echo", "$$(MCP_TOOL_ARGUMENTS)"]}));
        assert_eq!(template_problem(&escaped), None, "an escaped reference is literal text");
        let other =
            template(json!({"name": "t", "image": "i", "args": ["--run=$(MCP_TOOL_RUN)", "$(HOME)"]}));
        assert_eq!(template_problem(&other), None);
    }

    #[test]
    fn an_ill_typed_template_fails_only_itself() {
        #[derive(Deserialize)]
        struct Holder {
            #[serde(deserialize_with = "lenient_template")]
            t: JobTemplateSpec,
        }
        let list: Vec<Holder> = serde_json::from_value(json!([
            {"t": {"spec": {"backoffLimit": "many", "template": {}}}},
            {"t": {"spec": {"backoffLimit": 1, "template": {}}}},
        ]))
        .unwrap();
        assert!(template_problem(&list[0].t).unwrap().contains("not a batch/v1 Job template"));
        assert_eq!(list[1].t.spec.as_ref().unwrap().backoff_limit, Some(1));
        assert!(template_problem(&list[1].t).is_none());
    }
}

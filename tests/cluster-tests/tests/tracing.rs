//! Trace context end to end: one MCP call is one trace, from the caller's
//! `traceparent` through the frontend, the operator's reconciles and the
//! block Jobs' miners, as received by a real OTLP/HTTP receiver.

use mining_api::Work as _;
use std::time::Duration;

use cluster_tests::mcp::FrontendProcess;
use cluster_tests::otlp::{OtlpReceiver, ReceivedSpan};
use cluster_tests::{OperatorProcess, TestNamespace, eventually, install_crd, operator_binary};
use mining_api::MiningWorkflow;
use serde_json::{Value, json};

fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("a random source");
    buffer.iter().map(|b| format!("{b:02x}")).collect()
}

/// `start_mining` through the plain tool (protocol 2025-06-18), with the
/// caller's trace in `_meta` or in the HTTP header; returns the structured answer.
async fn start_mining(frontend: &FrontendProcess, traceparent: &str, in_meta: bool) -> Value {
    let mut params =
        json!({"name": "start_mining", "arguments": {"difficulty": 8, "blocks": 2, "wait_seconds": 20}});
    let header = format!("traceparent: {traceparent}");
    let headers: Vec<&str> = if in_meta {
        params["_meta"] = json!({"traceparent": traceparent});
        vec![]
    } else {
        vec![header.as_str()]
    };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let (code, _, text) = frontend.post_mcp("localhost", &headers, &body.to_string()).await;
    assert_eq!(code, 200, "{text}");
    let start = text.rfind("{\"jsonrpc\"").or_else(|| text.find('{')).expect(&text);
    let answer: Value = serde_json::from_str(text[start..].lines().next().unwrap_or_default()).expect(&text);
    answer["result"]["structuredContent"].clone()
}

/// The spans of `trace_id` once `enough` says so; panics with everything received after 60 s.
async fn spans_of(
    receiver: &OtlpReceiver,
    trace_id: &str,
    enough: impl Fn(&[ReceivedSpan]) -> bool,
) -> Vec<ReceivedSpan> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let all = receiver.spans();
        let mine: Vec<ReceivedSpan> = of_trace(&all, trace_id).into_iter().cloned().collect();
        if enough(&mine) {
            return mine;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "trace {trace_id} incomplete after 60 s; received: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn of_trace<'a>(spans: &'a [ReceivedSpan], trace_id: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.trace_id == trace_id).collect()
}

#[ignore = "the Job's miner reports to the test's receiver on 127.0.0.1: needs the local node agent, whose Pods share the host's network; tests/run.sh runs it there"]
#[tokio::test]
async fn one_call_is_one_trace_from_the_caller_through_the_operator_to_the_jobs() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = receiver.endpoint();
    // Exported within a fifth of a second instead of the SDK's 5 s.
    let otel = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let ns = TestNamespace::new("tracing").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start_with_env(
        &operator_binary(),
        &ns.name,
        &["--miner-otlp-endpoint", &endpoint],
        &otel,
    );
    let frontend = FrontendProcess::spawn(&ns.name, &[], &otel);
    eventually("the frontend to be ready", Duration::from_secs(30), || async {
        (frontend.get("/readyz").await.0 == 200).then_some(())
    })
    .await;

    for in_meta in [true, false] {
        let (trace_id, caller_span) = (random_hex(16), random_hex(8));
        let traceparent = format!("00-{trace_id}-{caller_span}-01");
        let answer = start_mining(&frontend, &traceparent, in_meta).await;
        assert_eq!(answer["status"], "completed", "{answer}");
        let id = answer["workflow_id"].as_str().unwrap();

        // Every part of the work reports into the caller's trace.
        let spans = spans_of(&receiver, &trace_id, |mine| {
            let count = |service: &str| mine.iter().filter(|s| s.service == service).count();
            count("mcp-frontend") >= 1 && count("mining-operator") >= 1 && count("miner") >= 2
        })
        .await;
        let frontend_span = spans
            .iter()
            .find(|s| s.service == "mcp-frontend" && s.name == "start_mining")
            .unwrap_or_else(|| panic!("no start_mining span: {spans:#?}"));
        assert_eq!(frontend_span.parent_span_id, caller_span, "the frontend continues the caller's span");
        for span in spans.iter().filter(|s| s.service != "mcp-frontend") {
            assert_eq!(
                span.parent_span_id, frontend_span.span_id,
                "the operator's and the Jobs' spans are the frontend call's children: {span:?}"
            );
        }
        assert!(spans.iter().any(|s| s.service == "mining-operator" && s.name == "reconcile"), "{spans:#?}");
        assert_eq!(
            spans.iter().filter(|s| s.service == "miner" && s.name == "mine").count(),
            2,
            "{spans:#?}"
        );

        // The workflow carries the frontend span's context (how the others joined).
        let workflow: MiningWorkflow = ns.api().get(id).await.unwrap();
        let stored = workflow.annotation(mining_api::annotations::TRACEPARENT).unwrap_or_default();
        assert_eq!(stored, format!("00-{trace_id}-{}-01", frontend_span.span_id), "{stored}");
    }

    // A call without a trace starts one; a malformed traceparent counts as none.
    let answer = start_mining(&frontend, "00-not-a-trace", true).await;
    assert_eq!(answer["status"], "completed", "{answer}");
    let workflow: MiningWorkflow = ns.api().get(answer["workflow_id"].as_str().unwrap()).await.unwrap();
    let stored = workflow.annotation(mining_api::annotations::TRACEPARENT).unwrap_or_default().to_string();
    let parsed = mining_api::trace::TraceParent::parse(&stored).unwrap_or_else(|| panic!("{stored:?}"));
    spans_of(&receiver, &parsed.trace_id_hex(), |mine| {
        mine.iter().any(|s| s.service == "mcp-frontend" && s.parent_span_id.is_empty())
    })
    .await;
}

//! Tracing for every binary of the project, set up once.
//!
//! Log lines go to stderr as before. Spans always carry W3C trace context
//! (so a call's trace id can be logged and handed on even when nothing is
//! exported); they are exported over OTLP/HTTP only when the standard
//! environment names a collector (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, with `OTEL_EXPORTER_OTLP_PROTOCOL`,
//! `_HEADERS`, `_TIMEOUT` as the OpenTelemetry spec defines them;
//! `OTEL_TRACES_EXPORTER=none` turns it off; `OTEL_SERVICE_NAME` renames
//! the service). Off by default.

use mining_api::trace::TraceParent;
use opentelemetry::trace::{
    SpanContext, TraceContextExt as _, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, SpanId};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Keeps the exporter alive; dropping it sends what is still buffered.
#[must_use = "dropping it at once stops the export"]
pub struct Telemetry {
    provider: SdkTracerProvider,
    exporting: bool,
}

impl Telemetry {
    /// Whether spans leave the process.
    pub fn exporting(&self) -> bool {
        self.exporting
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if self.exporting
            && let Err(err) = self.provider.shutdown()
        {
            eprintln!("telemetry: flushing spans at exit failed: {err}");
        }
    }
}

/// Whether the environment asks for OTLP export (pure over `var`).
pub fn export_configured(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|value| !value.trim().is_empty());
    let off = var("OTEL_TRACES_EXPORTER").is_some_and(|value| value.trim().eq_ignore_ascii_case("none"));
    !off && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Installs the global subscriber: log lines filtered by `RUST_LOG` (else
/// `default_filter`), and spans with trace context, exported when configured.
pub fn init(service: &'static str, default_filter: &str) -> Telemetry {
    let exporting = export_configured(|name| std::env::var(name).ok());
    let mut provider = SdkTracerProvider::builder().with_resource(
        Resource::builder()
            .with_service_name(std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service.to_string()))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build(),
    );
    let mut export_error = None;
    if exporting {
        // The spec's default is http/protobuf; with the JSON encoder also
        // compiled in, the crate would otherwise default to JSON.
        let protocol = match std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
            .map(str::trim)
        {
            Ok("http/json") => opentelemetry_otlp::Protocol::HttpJson,
            _ => opentelemetry_otlp::Protocol::HttpBinary,
        };
        match span_exporter(protocol) {
            Ok(exporter) => provider = provider.with_batch_exporter(exporter),
            Err(err) => export_error = Some(err.to_string()),
        }
    }
    let provider = provider.build();
    let tracer = provider.tracer(service);
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: in a Pod's log they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .init();
    if let Some(err) = &export_error {
        tracing::warn!(error = %err, "OTLP export is configured but cannot start; spans are not exported");
    }
    Telemetry { provider, exporting: exporting && export_error.is_none() }
}

/// A TLS client configuration that needs nothing from the file system:
/// ring, and Mozilla's roots compiled in plus `extra_roots`. The images are
/// `FROM scratch` (no system certificates), where reqwest's default
/// platform verifier finds no roots and refuses to build a client at all.
pub fn bundled_roots_tls(
    extra_roots: impl IntoIterator<Item = rustls::pki_types::CertificateDer<'static>>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for certificate in extra_roots {
        roots.add(certificate)?;
    }
    Ok(rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

/// The OTLP/HTTP exporter, over a blocking reqwest client of ours rather
/// than the SDK's default one: that one takes its roots from the system
/// (none in our images: "builder error", nothing exported) and, built
/// with `rustls-no-provider` as feature unification makes it here (the
/// operator's S3 client), panics without an installed TLS provider.
fn span_exporter(
    protocol: opentelemetry_otlp::Protocol,
) -> Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError> {
    let failed = |what: String| opentelemetry_otlp::ExporterBuildError::InternalFailure(what);
    let tls = bundled_roots_tls([]).map_err(|err| failed(format!("TLS configuration: {err}")))?;
    let timeout = export_timeout(|name| std::env::var(name).ok());
    // A blocking client owns a runtime, which must not be built (or
    // dropped) on a thread of an async runtime: the operator's main is one.
    let client = std::thread::spawn(move || {
        reqwest::blocking::Client::builder().tls_backend_preconfigured(tls).timeout(timeout).build()
    })
    .join()
    .map_err(|_| failed("the thread building the OTLP HTTP client panicked".into()))?
    .map_err(|err| failed(format!("building the OTLP HTTP client: {err}")))?;
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(protocol)
        .build()
}

/// The export timeout the OpenTelemetry spec's variables name (milliseconds), 10 s by default.
fn export_timeout(var: impl Fn(&str) -> Option<String>) -> std::time::Duration {
    ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .iter()
        .find_map(|name| var(name).and_then(|value| value.trim().parse::<u64>().ok()))
        .map_or(std::time::Duration::from_secs(10), std::time::Duration::from_millis)
}

/// Makes `span` continue the trace `parent` names (a remote parent).
pub fn continue_trace(span: &tracing::Span, parent: &TraceParent) {
    let context = SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        TraceState::default(),
    );
    let _ = span.set_parent(Context::new().with_remote_span_context(context));
}

/// `span`'s own place in its trace, to hand to work it starts elsewhere;
/// `None` when it has no trace context (no subscriber, or filtered out).
pub fn traceparent_of(span: &tracing::Span) -> Option<TraceParent> {
    let context = span.context();
    let span_ref = context.span();
    let own = span_ref.span_context();
    own.is_valid().then(|| TraceParent {
        trace_id: own.trace_id().to_bytes(),
        parent_id: own.span_id().to_bytes(),
        flags: own.trace_flags().to_u8(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The images have no system certificates: the SDK's default client
    /// then failed to build ("builder error") and nothing was exported. The
    /// workspace's test build also unifies reqwest's features as the images'
    /// build does (`rustls-no-provider`), where no installed provider panicked.
    #[test]
    fn the_exporter_starts_without_system_certificates_or_an_installed_tls_provider() {
        // As in a `FROM scratch` image (nextest runs each test in its own process).
        unsafe {
            std::env::set_var("SSL_CERT_FILE", "/nonexistent/ca.pem");
            std::env::set_var("SSL_CERT_DIR", "/nonexistent");
        }
        for protocol in [opentelemetry_otlp::Protocol::HttpBinary, opentelemetry_otlp::Protocol::HttpJson] {
            if let Err(err) = span_exporter(protocol) {
                panic!("{err}");
            }
        }
    }

    #[test]
    fn the_export_timeout_is_the_specs_milliseconds() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
        };
        assert_eq!(export_timeout(env(&[])), std::time::Duration::from_secs(10));
        assert_eq!(export_timeout(env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")])).as_millis(), 2500);
        let both =
            env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"), ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700")]);
        assert_eq!(export_timeout(both).as_millis(), 700);
        assert_eq!(export_timeout(env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")])).as_secs(), 10);
    }

    #[test]
    fn export_needs_an_endpoint_and_is_off_when_said() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
        };
        assert!(!export_configured(env(&[])));
        assert!(!export_configured(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(export_configured(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")])));
        assert!(export_configured(env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")])));
        assert!(!export_configured(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])));
    }
}

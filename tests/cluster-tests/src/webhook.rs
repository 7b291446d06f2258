//! An admission webhook of the tests (a Python script under
//! tests/cluster-tests/webhook/, served over TLS with a self-signed
//! certificate) registered for one test namespace, the way real clusters'
//! admission (a mesh, Kueue, Pod Security, a policy engine) meets our work.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::{TestNamespace, eventually, free_port, repo_root};

/// Whether the webhook may change what it admits, or only refuse it.
#[derive(Clone, Copy, Debug)]
pub enum Admission {
    Mutating,
    Validating,
}

impl Admission {
    fn resource(self) -> &'static str {
        match self {
            Admission::Mutating => "mutatingwebhookconfiguration",
            Admission::Validating => "validatingwebhookconfiguration",
        }
    }
}

/// The webhook process and its configuration; both go when dropped (the
/// configuration by kubectl: a drop may run while the test's runtime unwinds).
pub struct Webhook {
    process: Child,
    name: String,
    admission: Admission,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = Command::new("kubectl")
            .args(["delete", self.admission.resource(), &self.name, "--ignore-not-found", "--wait=false"])
            .stdout(Stdio::null())
            .status();
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A rule for CREATE of `resource` in API group `group` (v1).
pub fn create_rule(group: &str, resource: &str) -> Value {
    json!({"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]})
}

/// Starts `script` (under tests/cluster-tests/webhook/) and registers it as
/// `webhook` (its name, e.g. `mesh.example.com`) for `rules` in `ns` only
/// (the namespace is labelled to select it), failing closed.
pub async fn start(
    ns: &TestNamespace,
    script: &str,
    webhook: &str,
    admission: Admission,
    rules: Vec<Value>,
) -> Webhook {
    let dir = std::env::temp_dir().join(format!("webhook-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(made.success(), "a self-signed certificate");
    let port = free_port().port();
    let process = Command::new("python3")
        .arg(repo_root().join("tests/cluster-tests/webhook").join(script))
        .arg(port.to_string())
        .arg(&cert)
        .arg(&key)
        .stdout(Stdio::null())
        .spawn()
        .expect("start the webhook");
    eventually("the webhook to listen", Duration::from_secs(20), || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(ns.client.clone());
    let label = json!({"metadata": {"labels": {"webhook-test": ns.name}}});
    namespaces.patch(&ns.name, &PatchParams::default(), &Patch::Merge(label)).await.unwrap();
    let name = format!("{}-{}", script.trim_end_matches(".py").replace('_', "-"), ns.name);
    let ca = base64_of(&std::fs::read(&cert).unwrap());
    let kind = match admission {
        Admission::Mutating => "MutatingWebhookConfiguration",
        Admission::Validating => "ValidatingWebhookConfiguration",
    };
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name},
        "webhooks": [{
            "name": webhook,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/admit"), "caBundle": ca},
            "rules": rules,
            "namespaceSelector": {"matchLabels": {"webhook-test": ns.name}},
            // Fail, not Ignore: a webhook that does not answer must not let
            // a test pass on objects nobody admitted.
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
        }],
    });
    match admission {
        Admission::Mutating => {
            let api: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
            api.create(&PostParams::default(), &serde_json::from_value(configuration).unwrap())
                .await
                .unwrap();
        }
        Admission::Validating => {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(ns.client.clone());
            api.create(&PostParams::default(), &serde_json::from_value(configuration).unwrap())
                .await
                .unwrap();
        }
    }
    Webhook { process, name, admission }
}

fn base64_of(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

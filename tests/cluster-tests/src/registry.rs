//! The local cluster's private registry (tests/cluster/cluster.sh): TLS
//! with a certificate of its own, htpasswd authentication, no anonymous
//! pulls. Tests push this machine's images to it under a path of their own,
//! so that the node has never pulled them and must, with a pull secret.

use std::path::PathBuf;
use std::process::Command;

/// Where the registry is and how to get in.
pub struct Registry {
    /// `127.0.0.1:PORT`, as image references name it.
    pub host: String,
    pub user: String,
    pub password: String,
    /// A directory holding the registry's CA as `ca.crt` (podman's `--cert-dir`).
    pub trust: PathBuf,
}

impl Registry {
    /// The registry of the cluster in `$KUBECONFIG` (its state directory).
    /// Panics with a hint when that cluster has none.
    pub fn local() -> Self {
        let kubeconfig = std::env::var_os("KUBECONFIG").expect("KUBECONFIG names the local cluster");
        let dir = PathBuf::from(kubeconfig).parent().expect("the cluster's state directory").join("registry");
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .unwrap_or_else(|err| {
                    panic!(
                        "{}: {err} (the local cluster's registry: tests/cluster/cluster.sh up)",
                        dir.display()
                    )
                })
                .trim()
                .to_string()
        };
        let host = read("host");
        let credentials = read("credentials");
        let (user, password) = credentials.split_once(':').expect("USER:PASSWORD");
        Registry { host, user: user.into(), password: password.into(), trust: dir.join("trust") }
    }

    /// The CA file clients trust the registry with (helm's `--ca-file`).
    pub fn ca_file(&self) -> PathBuf {
        self.trust.join("ca.crt")
    }

    /// A repository path no one used before: `PREFIX-<nanoseconds>`.
    pub fn unique_path(prefix: &str) -> String {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        format!("{prefix}-{nanos}")
    }

    /// Pushes the local image `local` (`localhost/mining-operator/miner:dev`)
    /// as `HOST/path/NAME:TAG` (its last component kept); the pushed reference.
    pub fn push(&self, local: &str, path: &str) -> String {
        let name = local.rsplit('/').next().expect("an image name");
        let remote = format!("{}/{path}/{name}", self.host);
        let pushed = Command::new("podman")
            .args(["push", "--quiet", "--cert-dir"])
            .arg(&self.trust)
            .args(["--creds", &format!("{}:{}", self.user, self.password), local])
            .arg(format!("docker://{remote}"))
            .output()
            .expect("run podman push");
        assert!(pushed.status.success(), "podman push {local}: {}", String::from_utf8_lossy(&pushed.stderr));
        remote
    }

    /// `kubectl create secret docker-registry NAME` for this registry in
    /// `namespace`, as a platform team makes a pull secret.
    pub fn create_pull_secret(&self, namespace: &str, name: &str) {
        let made = Command::new("kubectl")
            .args(["create", "secret", "docker-registry", name, "-n", namespace])
            .arg(format!("--docker-server={}", self.host))
            .arg(format!("--docker-username={}", self.user))
            .arg(format!("--docker-password={}", self.password))
            .output()
            .expect("run kubectl");
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    }

    /// Whether podman's store (the node's) holds `image`.
    pub fn node_holds(image: &str) -> bool {
        Command::new("podman").args(["image", "exists", image]).status().is_ok_and(|s| s.success())
    }
}

//! An S3 API server over a directory (s3s-fs, from crates.io; tests/run.sh
//! installs it and names it in `S3S_FS`), for the tests of files kept in
//! an S3-compatible store. Stopped when dropped.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::{eventually, free_port};

pub struct S3Server {
    child: std::process::Child,
    /// Where it listens (plain HTTP).
    pub addr: SocketAddr,
}

impl S3Server {
    /// Serves `root` (each directory a bucket) to the holder of `access` and
    /// `secret`, and waits until it listens.
    pub async fn start(root: &Path, access: &str, secret: &str) -> Self {
        let binary = std::env::var("S3S_FS").expect("S3S_FS: the s3s-fs binary tests/run.sh installs");
        let addr = free_port();
        let child = std::process::Command::new(&binary)
            .args(["--host", &addr.ip().to_string(), "--port", &addr.port().to_string()])
            .args(["--access-key", access, "--secret-key", secret])
            .arg(root)
            .spawn()
            .expect("start s3s-fs");
        eventually("s3s-fs to listen", Duration::from_secs(30), || async {
            tokio::net::TcpStream::connect(addr).await.ok().map(|_| ())
        })
        .await;
        Self { child, addr }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! Records the commit the binary was built from (results.json `context.commit`, docs/metrics.md
//! "Run context"); empty outside a git checkout.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    println!("cargo:rustc-env=STRATUMLAB_COMMIT={commit}");
    // A new commit or checkout moves HEAD or the branch it points at.
    for f in ["../../.git/HEAD", "../../.git/refs/heads"] {
        println!("cargo:rerun-if-changed={f}");
    }
}

//! A third-party role does not inherit the variables by which the SV2 reference roles override
//! their config files: the config the lab wrote is the one that runs. Its own test binary, so
//! that setting variables races no other test.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use lab::process::{RoleProcess, THIRD_PARTY};

#[test]
fn config_overrides_are_not_passed_to_a_third_party_role() {
    // SAFETY: the only test in this binary, before any thread of ours starts.
    unsafe {
        std::env::set_var("POOL__LISTEN_ADDRESS", "0.0.0.0:3333");
        std::env::set_var("TPROXY__AGGREGATE_CHANNELS", "false");
        std::env::set_var("JDC__MODE", "COINBASEONLY");
        std::env::set_var("STRATUMLAB_ENV_KEPT", "yes");
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("env.log");
    let args: Vec<OsString> = vec!["-c".into(), "env".into()];
    let mut p =
        RoleProcess::spawn_as("env", Path::new("/bin/sh"), &args, &log, THIRD_PARTY).unwrap();
    assert!(
        p.wait_done(Duration::from_secs(10)).is_some(),
        "sh did not end"
    );
    let env = std::fs::read_to_string(&log).unwrap();
    assert!(env.contains("STRATUMLAB_ENV_KEPT=yes"), "{env}");
    for gone in ["POOL__", "TPROXY__", "JDC__"] {
        assert!(!env.contains(gone), "{gone} reached the role:\n{env}");
    }
    // Our own roles keep them (they do not read them, and a user may mean them for a child).
    let log = dir.path().join("ours.log");
    let args: Vec<OsString> = vec!["-c".into(), "env >&2".into()];
    let mut p = RoleProcess::spawn("ours", Path::new("/bin/sh"), &args, &log).unwrap();
    assert!(
        p.wait_done(Duration::from_secs(10)).is_some(),
        "sh did not end"
    );
    let env = std::fs::read_to_string(&log).unwrap();
    assert!(env.contains("POOL__LISTEN_ADDRESS="), "{env}");
}

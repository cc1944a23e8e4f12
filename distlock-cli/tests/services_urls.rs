//! Every URL `scripts/services.sh urls` prints works with `distlock exec --url` as printed (the
//! plain stores, and the TLS and authenticated deployments): the command runs under the lock and
//! sees its fencing token.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};

fn printed_urls() -> Vec<(String, String)> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/services.sh");
    let out = Command::new(script).arg("urls").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("DISTLOCK_TEST_") && k.ends_with("_URL"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn exec_accepts_every_printed_url() {
    let urls = printed_urls();
    assert!(
        urls.iter().any(|(k, _)| k == "DISTLOCK_TEST_REDIS_TLS_URL"),
        "services.sh urls printed no TLS URL: {urls:?}"
    );
    let mut tried = 0;
    for (key, url) in urls {
        if url.starts_with("etcd") && !cfg!(feature = "etcd") {
            continue;
        }
        // The namespace ensemble exists only where services.sh could make namespaces.
        if key == "DISTLOCK_TEST_ZK_NETNS_URL" {
            continue;
        }
        let name = format!("urls-{}", support::unique());
        let out = support::bin()
            .args([
                "exec", "--url", &url, "--name", &name, "--wait", "20s", "--",
            ])
            .args(["sh", "-c", "echo token=$DISTLOCK_FENCING_TOKEN"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("token=") && stdout.trim() != "token=",
            "{key}={url}: exit {:?}, stdout {stdout:?}, stderr {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        tried += 1;
    }
    assert!(tried >= 7, "only {tried} URLs tried");
}

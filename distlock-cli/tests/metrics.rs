//! `--metrics-addr`: while CMD runs, `http://ADDR/metrics` serves distlock's series in
//! Prometheus' text format (read here by CMD itself, under the lock); an address that cannot
//! be bound is a usage error before anything is held.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpListener;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn exec_serves_its_metrics_while_the_command_runs() {
    let dir = support::tmp("metrics", "serve");
    let port = free_port();
    let fetch = format!(
        "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/metrics', timeout=10).read().decode())\""
    );
    let out = support::bin()
        .args([
            "exec",
            "--url",
            &format!("sqlite://{}/locks.db", dir.display()),
        ])
        .args(["--name", "metrics", "--wait", "10s"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--", "sh", "-c", &fetch])
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    for series in [
        "distlock_acquisitions_total{backend=\"sqlite-row\",outcome=\"acquired\"} 1",
        "distlock_wait_seconds_count{backend=\"sqlite-row\"} 1",
    ] {
        assert!(page.contains(series), "no `{series}` in:\n{page}");
    }
}

#[test]
fn an_address_in_use_is_refused_before_anything_is_held() {
    let dir = support::tmp("metrics", "in-use");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = support::bin()
        .args([
            "exec",
            "--url",
            &format!("sqlite://{}/locks.db", dir.display()),
        ])
        .args(["--name", "metrics", "--metrics-addr", &addr, "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(&format!("--metrics-addr {addr}")),
        "{stderr}"
    );
    let bad = support::bin()
        .args(["exec", "--url", "sqlite:///tmp/x.db", "--name", "m"])
        .args(["--metrics-addr", "not-an-address", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--metrics-addr"));
}

//! The ZooKeeper client's connections set `TCP_NODELAY`, as ZooKeeper's Java client does
//! (distlock-zookeeper-client, the fork in `vendor/`, see `vendor/README.md`): without it, a request
//! written while an earlier one is unanswered waits for that answer — behind a create or a
//! delete, a quorum write — and pipelined requests (the `sync` and the re-list after a watch
//! fires) lose their point. Read from this process's own sockets; one test in this file, so
//! no other test opens or closes sockets meanwhile.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use nix::sys::socket::{getpeername, getsockopt, sockopt::TcpNoDelay, SockaddrStorage};
use support::*;

/// Whether each of this process's TCP sockets connected to `port` sets `TCP_NODELAY`.
fn nodelay_of_sockets_to(port: u16) -> Vec<bool> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let entry = entry.unwrap();
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: `fd` was open in this process when listed just now. This binary runs one
        // test, whose only sockets are the ZooKeeper client's (open while it holds the lock)
        // and the runtime's; should one close in between, the calls below fail on a closed
        // descriptor (skipped) — nothing is read through the borrow beyond them.
        #[allow(unsafe_code)]
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let Ok(peer) = getpeername::<SockaddrStorage>(fd.as_raw_fd()) else {
            continue;
        };
        let peer_port = peer
            .as_sockaddr_in()
            .map(|a| a.port())
            .or_else(|| peer.as_sockaddr_in6().map(|a| a.port()));
        if peer_port == Some(port) {
            found.push(getsockopt(&fd, TcpNoDelay).unwrap());
        }
    }
    found
}

#[tokio::test]
async fn the_client_connection_sets_tcp_nodelay() {
    let url = standalone_url();
    let port = ports(&url)[0];
    let lock = zk_lock(&url).await;
    let g = lock
        .acquire(
            &unique("nodelay"),
            &AcquireOptions::new().ttl(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let sockets = nodelay_of_sockets_to(port);
    g.release().await.unwrap();
    assert!(
        !sockets.is_empty(),
        "no socket of this process is connected to port {port}"
    );
    assert!(
        sockets.iter().all(|&on| on),
        "ZooKeeper connections without TCP_NODELAY: {sockets:?} (is distlock-zookeeper-client, vendor/, the client in use?)"
    );
}

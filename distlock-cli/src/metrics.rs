//! `--metrics-addr ADDR`: distlock's series (`distlock::metrics`: acquisitions, waits, holds,
//! losses, renewal failures, each by backend) served in Prometheus' text format at
//! `http://ADDR/metrics` while `exec` or `elect` runs, for the long-running jobs a scraper
//! can see. Bound before the lock is asked for, so an address in use is a usage error with
//! nothing held.

use std::net::SocketAddr;

/// Installs the Prometheus recorder and its HTTP listener on the current runtime.
///
/// # Errors
/// A message naming `addr` when it cannot be bound (or a recorder is installed already).
pub fn serve(addr: SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| format!("--metrics-addr {addr}: cannot serve metrics there ({e})"))
}

//! Helpers the facade's process tests share: the `distlock` binary, unique suffixes and
//! per-test temporary directories.
#![allow(dead_code, clippy::unwrap_used)]

#[cfg(target_os = "linux")]
pub mod java;
#[cfg(target_os = "linux")]
pub mod procs;

use std::path::PathBuf;
use std::process::Command;

/// The `distlock` binary built for these tests.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_distlock"))
}

/// A number unique enough to keep test names and directories of parallel runs apart.
pub fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A fresh temporary directory `distlock-{suite}-{what}-{pid}-{unique}`.
pub fn tmp(suite: &str, what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "distlock-{suite}-{what}-{}-{}",
        std::process::id(),
        unique()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

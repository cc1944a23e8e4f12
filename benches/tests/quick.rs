//! Runs the benchmark harness in `--quick` mode on SQLite (no services needed) and checks the
//! report it writes: CI catches a broken harness.

use std::process::Command;

#[test]
fn quick_run_on_sqlite_writes_the_report() {
    let out = std::env::temp_dir().join(format!("distlock-bench-test-{}", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_benches"))
        .args(["--quick", "--out"])
        .arg(&out)
        .status()
        .expect("run the benchmark binary");
    assert!(status.success(), "benchmark exited with {status}");
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains("sqlite-row"), "{md}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).expect("results.json"),
    )
    .expect("valid JSON");
    let rows = json.as_array().expect("an array of results");
    for scenario in [
        "uncontended",
        "contended",
        "contended-procs",
        "failover",
        "scaling-waiters",
        "scaling-names",
    ] {
        assert!(
            rows.iter().any(|r| r["scenario"] == scenario),
            "no {scenario} row"
        );
    }
    for r in rows {
        for field in [
            "backend",
            "scenario",
            "ops_per_sec",
            "p50_us",
            "p99_us",
            "baseline_ops_per_sec",
            "ratio_vs_baseline",
            "same_holder_fraction",
            "violations",
        ] {
            assert!(r.get(field).is_some(), "missing {field} in {r}");
        }
        assert_eq!(r["violations"], 0, "violations in {r}");
    }
    let uncontended = rows
        .iter()
        .find(|r| r["scenario"] == "uncontended")
        .expect("uncontended row");
    assert!(uncontended["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0);
    assert!(uncontended["baseline_ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0);
    let procs = rows
        .iter()
        .find(|r| r["scenario"] == "contended-procs")
        .expect("contended-procs row");
    assert!(
        procs["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
        "no acquisitions across processes: {procs}"
    );
    // Beside the default 8 processes, 2 (where a waiter missing its place shows).
    let counts: Vec<u64> = rows
        .iter()
        .filter(|r| r["scenario"] == "contended-procs")
        .filter_map(|r| r["param"].as_u64())
        .collect();
    assert_eq!(counts, [8, 2], "process counts of the contended-procs rows");
    assert!(md.contains("Contended across processes"), "{md}");
    assert!(out.join("latency.svg").exists());
    assert!(out.join("report.html").exists());
    quick_grid_is_small_and_complete(rows);
}

/// `--quick` shortens the grid to 1, 2, 8 processes × 0, 10 ms, every cell counted.
fn quick_grid_is_small_and_complete(rows: &[serde_json::Value]) {
    let grid: Vec<&serde_json::Value> = rows.iter().filter(|r| r["scenario"] == "grid").collect();
    let mut cells: Vec<(u64, u64)> = grid
        .iter()
        .map(|r| {
            (
                r["processes"].as_u64().unwrap_or(0),
                r["hold_ms"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    cells.sort_unstable();
    assert_eq!(
        cells,
        [(1, 0), (1, 10), (2, 0), (2, 10), (8, 0), (8, 10)],
        "grid cells"
    );
    for r in grid {
        let (min, max) = (r["min_per_client"].as_u64(), r["max_per_client"].as_u64());
        let total = r["acquisitions"].as_u64().unwrap_or(0);
        assert!(total > 0 && min <= max && max <= Some(total), "{r}");
        assert_eq!(r["backend"], "sqlite-row", "{r}");
    }
}

/// The semaphore and read-write lock scenarios on the real single Redis (`scripts/services.sh
/// up`) and on SQLite: both rows are written for each, the semaphore never had more than its 4
/// permits out, and no violation was seen. (Holds last one yield, so how many permits are out
/// at once depends on timing: that all N get used is checked where holds are long, in
/// `distlock-cli/tests/exec_permits.rs` and the conformance cases.)
#[test]
fn quick_semaphore_and_rwlock_rows_keep_their_bounds() {
    let out = std::env::temp_dir().join(format!("distlock-bench-permits-{}", std::process::id()));
    let redis = std::env::var("DISTLOCK_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:16379".into());
    let sqlite = format!("sqlite://{}/bench.db", out.display());
    std::fs::create_dir_all(&out).expect("a temporary directory");
    let status = Command::new(env!("CARGO_BIN_EXE_benches"))
        .args([
            "--quick",
            "--scenario",
            "semaphore",
            "--url",
            &redis,
            "--url",
            &sqlite,
            "--out",
        ])
        .arg(&out)
        .status()
        .expect("run the benchmark binary");
    assert!(status.success(), "benchmark exited with {status}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).expect("results.json"),
    )
    .expect("valid JSON");
    let rows = json.as_array().expect("an array of results");
    let row = |backend: &str, scenario: &str| {
        rows.iter()
            .find(|r| r["backend"] == backend && r["scenario"] == scenario)
            .unwrap_or_else(|| panic!("no {backend} {scenario} row in {json}"))
    };
    for backend in ["redis", "sqlite-row"] {
        let sem = row(backend, "semaphore");
        let peak = sem["param"].as_u64().unwrap_or(0);
        assert!((1..=4).contains(&peak), "peak holders of 4 permits: {sem}");
        let rw = row(backend, "rwlock");
        for r in [sem, rw] {
            assert_eq!(r["violations"], 0, "{r}");
            assert!(r["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        }
    }
}

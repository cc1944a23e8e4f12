//! The docs cannot drift from what they describe: every number the README quotes is recomputed
//! here from the code or from the committed report it names (and the README may quote no other
//! number), the docs' tables of figures are compared cell by cell with their reports, the URL
//! parameters and `LockError` variants they list with the code, every path and relative link
//! must exist, and every Markdown file with a Rust block must be compiled as a doctest
//! (`src/lib.rs`). Reading only: no store needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// Reading Markdown and Rust as text

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// `text` with every run of whitespace made one space, so a phrase may wrap anywhere.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The number (digits, at most one decimal point) that starts right after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> String {
    let at = text
        .find(prefix)
        .unwrap_or_else(|| panic!("the docs no longer say {prefix:?}: update tests/readme.rs"));
    leading_number(&text[at + prefix.len()..])
        .unwrap_or_else(|| panic!("no number after {prefix:?}"))
}

fn leading_number(s: &str) -> Option<String> {
    let n: String = s
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let n = n.trim_end_matches('.').to_owned();
    (!n.is_empty()).then_some(n)
}

/// Every number in `text`, in order (`0.76×` gives `0.76`, `2-core` gives `2`).
fn numbers_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(|c: char| c.is_ascii_digit()) {
        let n = leading_number(&rest[i..]).unwrap();
        rest = &rest[i + n.len()..];
        out.push(n);
    }
    out
}

/// The text between `from` and the next `to` after it.
fn between<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("the docs no longer say {from:?}: update tests/readme.rs"))
        + from.len();
    let len = text[start..]
        .find(to)
        .unwrap_or_else(|| panic!("nothing ends {from:?} with {to:?}"));
    &text[start..start + len]
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split('|')
        .map(|c| c.trim().to_owned())
        .collect()
}

/// The rows (header and separator left out) of the first table after `marker`.
fn table_after(text: &str, marker: &str) -> Vec<Vec<String>> {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?}: update tests/readme.rs"));
    text[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(cells)
        .collect()
}

/// The quoted strings of `const NAME: &[&str] = &[…];` in Rust source.
fn str_list(src: &str, name: &str) -> BTreeSet<String> {
    let body = between(src, &format!("const {name}: &[&str] = &["), "];");
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The inline code spans of `text`, fenced blocks left out.
fn code_spans(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in without_fences(text).split("``") {
        for (i, span) in part.split('`').enumerate() {
            if i % 2 == 1 {
                out.push(span.to_owned());
            }
        }
    }
    out
}

/// `text` without its fenced code blocks.
fn without_fences(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The target of every Markdown link and image in `text`, fenced blocks and code spans
/// left out.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, part) in without_fences(text).split('`').enumerate() {
        if i % 2 == 1 {
            continue;
        }
        let mut rest = part;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let end = tail.find(')').unwrap_or(tail.len());
            out.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    without_fences(text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// What the docs describe

/// The living docs (dated reports and the research survey are records of their day).
const DOCS: &[&str] = &[
    "README.md",
    "docs/README.md",
    "docs/safety.md",
    "docs/guide.md",
    "docs/configuration.md",
    "docs/cli.md",
    "docs/testing.md",
    "docs/design.md",
    "docs/platforms.md",
    "docs/troubleshooting.md",
    "docs/glossary.md",
    "docs/layout.md",
    "docs/bench/README.md",
];

/// The case names a suite macro instantiates (`macro_rules! NAME`'s `@cases` list).
fn suite_cases(src: &str, name: &str) -> Vec<String> {
    let after = &src[src
        .find(&format!("macro_rules! {name}"))
        .unwrap_or_else(|| panic!("no macro {name}"))..];
    between(after, "@cases $harness;", ");")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// How many test files instantiate the conformance suite: one target each.
fn conformance_targets() -> usize {
    let mut n = 0;
    let mut dirs = vec![root().join("tests")];
    for entry in std::fs::read_dir(root()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && path.join("Cargo.toml").exists() {
            dirs.push(path.join("tests"));
        }
    }
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        for file in std::fs::read_dir(dir).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("readme.rs") {
                let src = std::fs::read_to_string(path).unwrap();
                n += src
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .filter(|l| l.contains("conformance_suite!("))
                    .count();
            }
        }
    }
    n
}

/// One scenario of a chaos report, summed over its backends.
#[derive(Debug, Default, PartialEq)]
struct Scenario {
    backends: usize,
    overlaps: u64,
    overlaps_expected: u64,
    accepted: u64,
    rejected: u64,
    out_of_order: u64,
}

fn int(cell: &str) -> u64 {
    leading_number(cell)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a count: {cell:?}"))
}

/// A scripted chaos report, by scenario in the report's order, and its distinct backends.
fn chaos_report(rel: &str) -> (Vec<(String, Scenario)>, BTreeSet<String>) {
    let mut by: Vec<(String, Scenario)> = Vec::new();
    let mut backends = BTreeSet::new();
    for row in table_after(&read(rel), "| scenario | backend |") {
        backends.insert(row[1].clone());
        let at = match by.iter().position(|(s, _)| *s == row[0]) {
            Some(i) => i,
            None => {
                by.push((row[0].clone(), Scenario::default()));
                by.len() - 1
            }
        };
        let s = &mut by[at].1;
        s.backends += 1;
        let overlaps = int(&row[3]);
        s.overlaps += overlaps;
        if row[3].contains("expected") {
            s.overlaps_expected += overlaps;
        }
        s.accepted += int(&row[4]);
        s.rejected += int(&row[5]);
        s.out_of_order += int(&row[6]);
    }
    (by, backends)
}

/// A benchmark report's tables by section heading, rows keyed by their first cells.
struct Bench {
    text: String,
}

impl Bench {
    fn rows(&self, section: &str) -> Vec<Vec<String>> {
        table_after(&self.text, section)
    }

    fn row(&self, section: &str, label: &str, workers: Option<&str>) -> Option<Vec<String>> {
        self.rows(section)
            .into_iter()
            .find(|r| r[0] == label && workers.is_none_or(|w| r[1] == w))
    }
}

/// A microsecond cell as the docs print it, in milliseconds with one decimal.
fn ms(us: &str) -> f64 {
    us.parse::<f64>()
        .unwrap_or_else(|_| panic!("not µs: {us:?}"))
        / 1000.0
}

fn same_ms(doc: &str, us: &str) -> bool {
    doc.parse::<f64>()
        .is_ok_and(|d| (d - ms(us)).abs() <= 0.05 + 1e-9)
}

// ---------------------------------------------------------------------------------------------
// The README's numbers: each check returns the numbers it verified

fn readme() -> String {
    flat(&read("README.md"))
}

fn check_conformance_counts() -> Vec<String> {
    let src = read("distlock-core/src/conformance/mod.rs");
    let cases = suite_cases(&src, "conformance_suite").len().to_string();
    let targets = conformance_targets().to_string();
    let r = readme();
    assert_eq!(
        number_after(&r, "The conformance suite ("),
        cases,
        "README: conformance case count"
    );
    assert_eq!(
        number_after(&r, "runs unchanged on "),
        targets,
        "README: conformance targets (test files calling conformance_suite!)"
    );
    let permits = read("distlock-core/src/conformance/permits.rs");
    let s = flat(&read("docs/safety.md"));
    assert_eq!(
        number_after(&s, "the semaphore suite ("),
        suite_cases(&permits, "semaphore_suite").len().to_string()
    );
    assert_eq!(
        number_after(&s, "the read-write lock suite ("),
        suite_cases(&permits, "rwlock_suite").len().to_string()
    );
    vec![cases, targets]
}

fn check_chaos_summary() -> Vec<String> {
    let (by, backends) = chaos_report("docs/chaos-report-2026-11-29.md");
    let accepted: u64 = by.iter().map(|(_, s)| s.accepted).sum();
    let r = readme();
    let quoted = numbers_in(between(&r, "Scripted fault runs on ", " stale writes"));
    let want = vec![backends.len().to_string(), accepted.to_string()];
    assert_eq!(
        quoted, want,
        "README: backends and stale writes accepted in docs/chaos-report-2026-11-29.md"
    );
    want
}

fn check_bench_costs() -> Vec<String> {
    let bench = Bench {
        text: read("docs/bench/report-all.md"),
    };
    let r = read("README.md");
    let mut verified = Vec::new();
    let rows = table_after(&r, "## Pick a store");
    assert!(rows.len() >= 10, "README: the store table lost rows");
    for row in rows {
        let label = between(&row[0], "(`", "`)");
        let u = bench
            .row("## Uncontended", label, None)
            .unwrap_or_else(|| panic!("README row {label}: not in docs/bench/report-all.md"));
        let cost = numbers_in(&row[2]);
        assert_eq!(
            cost,
            vec![u[1].clone(), u[6].clone()],
            "README row {label}: cycles/s and lock ÷ raw vs docs/bench/report-all.md"
        );
        verified.extend(cost);
    }
    let cores = number_after(&readme(), "and the benchmark on one ");
    assert!(
        bench.text.contains(&format!("- machine: {cores} cores")),
        "README: the run's machine"
    );
    verified.push(cores);
    verified
}

fn check_rust_version() -> Vec<String> {
    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
    let ws = &manifest["workspace"];
    let msrv = ws["package"]["rust-version"].as_str().unwrap().to_owned();
    let sqlx = ws["dependencies"]["sqlx"]["version"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = readme();
    assert_eq!(
        number_after(&r, "`rust-version` is "),
        msrv,
        "README vs Cargo.toml's rust-version"
    );
    assert!(
        r.contains(&format!("`cargo +{msrv}.0 check")),
        "README: the check command names another toolchain than rust-version {msrv}"
    );
    assert_eq!(number_after(&r, "sqlx "), sqlx, "README: sqlx's version");
    vec![msrv, sqlx]
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn the_readme_is_a_front_door() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; move detail to docs/"
    );
}

#[test]
fn conformance_counts_are_the_suites() {
    check_conformance_counts();
}

#[test]
fn chaos_figures_are_the_reports() {
    check_chaos_summary();
    let (by, backends) = chaos_report("docs/chaos-report-2026-11-29.md");
    let safety = read("docs/safety.md");
    let rows = table_after(&safety, "## Fault runs");
    let doc: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    let report: Vec<&str> = by.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(doc, report, "docs/safety.md: the scenarios of the report");
    for (row, (name, s)) in rows.iter().zip(&by) {
        assert_eq!(row[1], s.backends.to_string(), "{name}: backends");
        let overlaps = if s.overlaps == 0 {
            "0".to_owned()
        } else {
            assert_eq!(
                s.overlaps, s.overlaps_expected,
                "{name}: unexpected overlaps"
            );
            format!("{} (expected)", s.overlaps)
        };
        assert_eq!(row[2], overlaps, "{name}: overlaps");
        assert_eq!(
            row[3],
            format!("{} / {}", s.accepted, s.rejected),
            "{name}: stale writes"
        );
        assert_eq!(row[4], s.out_of_order.to_string(), "{name}: out of order");
    }
    let runs: usize = by.iter().map(|(_, s)| s.backends).sum();
    let sum = |f: fn(&Scenario) -> u64| by.iter().map(|(_, s)| f(s)).sum::<u64>().to_string();
    let flat_safety = flat(&safety);
    assert_eq!(
        numbers_in(between(&flat_safety, "In all, ", "each one expected")),
        vec![
            runs.to_string(),
            backends.len().to_string(),
            sum(|s| s.accepted),
            sum(|s| s.rejected),
            sum(|s| s.out_of_order),
            sum(|s| s.overlaps),
        ],
        "docs/safety.md: the totals"
    );
    // The run before: its connection-kill rows (an old README said 147 rejected).
    let (before, _) = chaos_report("docs/chaos-report.md");
    let (_, kill) = before
        .iter()
        .find(|(n, _)| n == "holder's connections killed by the server")
        .unwrap();
    assert_eq!(
        numbers_in(between(
            &flat_safety,
            "its connection-kill rows sum to ",
            " rejected"
        )),
        vec![kill.accepted.to_string(), kill.rejected.to_string()]
    );
    // The half-minute random runs: one summary row per report, every verdict pass.
    let random = read("docs/chaos-random-2026-11-28.md");
    let verdicts: Vec<&str> = random
        .lines()
        .filter(|l| l.starts_with("| ") && (l.ends_with("| pass |") || l.ends_with("| fail |")))
        .collect();
    let sections = random
        .lines()
        .filter(|l| l.starts_with("# Random fault schedule: "))
        .count();
    assert_eq!(verdicts.len(), sections);
    assert!(verdicts.iter().all(|l| l.ends_with("| pass |")));
    assert_eq!(
        number_after(
            &flat_safety,
            "store pauses drawn on every networked store): "
        ),
        sections.to_string(),
        "docs/safety.md: reports in docs/chaos-random-2026-11-28.md"
    );
}

#[test]
fn the_short_random_run_is_the_test() {
    let src = read("distlock-chaos/tests/short.rs");
    let run = &src[src.find("async fn short_random_nemesis_run").unwrap()..];
    let secs = number_after(run, "duration: std::time::Duration::from_secs(");
    let labels: Vec<&str> = between(run, "let mut labels = vec![", "];")
        .split('"')
        .skip(1)
        .step_by(2)
        .collect();
    assert!(
        labels.contains(&"memory"),
        "the in-memory reference is no longer run"
    );
    let with_etcd = labels.len() + usize::from(run.contains("labels.push(\"etcd\")"));
    let s = flat(&read("docs/safety.md"));
    let claim = between(&s, "`distlock-chaos/tests/short.rs`): ", "feature");
    assert_eq!(
        numbers_in(claim),
        vec![secs, labels.len().to_string(), with_etcd.to_string()],
        "docs/safety.md: seconds per backend, backends, backends with etcd"
    );
}

#[test]
fn benchmark_figures_are_the_committed_run() {
    check_bench_costs();
    let bench = Bench {
        text: read("docs/bench/report-all.md"),
    };
    let doc = read("docs/bench/README.md");
    let dash = "–".to_owned();
    let mutex = table_after(&doc, "## The latest full run");
    assert!(
        mutex.len() >= 14,
        "docs/bench/README.md: the mutex table lost rows"
    );
    for row in &mutex {
        let b = row[0].as_str();
        let u = bench.row("## Uncontended", b, None);
        let c = bench.row("## Contended (worker", b, Some("8"));
        let p8 = bench.row("## Contended across", b, Some("8"));
        let p2 = bench.row("## Contended across", b, Some("2"));
        assert!(
            u.is_some() || c.is_some(),
            "{b}: not in docs/bench/report-all.md"
        );
        let pick =
            |r: &Option<Vec<String>>, i: usize| r.as_ref().map_or(dash.clone(), |r| r[i].clone());
        let want_exact = [
            (1, pick(&u, 1)),
            (2, pick(&u, 5)),
            (3, pick(&u, 6)),
            (4, pick(&c, 2)),
            (6, pick(&c, 7)),
            (7, pick(&p8, 2)),
            (9, pick(&p8, 7)),
            (10, pick(&p2, 7)),
        ];
        for (i, want) in want_exact {
            assert_eq!(row[i], want, "docs/bench/README.md, {b}, column {i}");
        }
        for (i, r) in [(5, &c), (8, &p8)] {
            match r {
                Some(r) => assert!(
                    same_ms(&row[i], &r[4]),
                    "{b}, column {i}: {} vs {} µs",
                    row[i],
                    r[4]
                ),
                None => assert_eq!(row[i], dash, "{b}, column {i}"),
            }
        }
        let violations: u64 = [&c, &p8, &p2]
            .iter()
            .filter_map(|r| r.as_ref())
            .map(|r| int(r.last().unwrap()))
            .sum();
        assert_eq!(row[11], violations.to_string(), "{b}: violations");
    }
    let permits = table_after(&doc, "Semaphore (16 workers, 4 permits)");
    assert!(permits.len() >= 10);
    let section = "## Semaphore (16 workers";
    for row in &permits {
        let b = row[0].as_str();
        let rows = bench.rows(section);
        let get = |kind: &str| {
            rows.iter()
                .find(|r| r[0] == b && r[1] == kind)
                .unwrap_or_else(|| panic!("{b} {kind}: not in the report"))
                .clone()
        };
        let (s, w) = (get("semaphore"), get("rwlock"));
        assert_eq!(row[1], s[2], "{b}: semaphore grants/s");
        assert!(same_ms(&row[2], &s[4]), "{b}: semaphore wait p99");
        assert_eq!(row[3], s[5], "{b}: peak permits out");
        assert_eq!(row[4], w[2], "{b}: read-write grants/s");
        assert!(same_ms(&row[5], &w[4]), "{b}: read-write wait p99");
        assert_eq!(
            row[6],
            (int(&s[7]) + int(&w[7])).to_string(),
            "{b}: violations"
        );
    }
    let failover = table_after(&doc, "Failover after SIGKILL");
    assert!(failover.len() >= 11);
    for row in &failover {
        let r = bench
            .row("## Failover", &row[0], None)
            .unwrap_or_else(|| panic!("{}: no failover row", row[0]));
        assert_eq!(row[1], r[1], "{}: failover", row[0]);
    }
}

#[test]
fn rust_version_is_the_manifests() {
    check_rust_version();
}

/// Every number in the README's prose and tables (code left out) is one a check above
/// recomputed: a new figure needs a check, or it goes to docs/.
#[test]
fn every_number_in_the_readme_is_checked() {
    let mut checked = BTreeSet::new();
    checked.extend(check_conformance_counts());
    checked.extend(check_chaos_summary());
    checked.extend(check_bench_costs());
    checked.extend(check_rust_version());
    let mut prose = String::new();
    for (i, part) in without_fences(&read("README.md")).split('`').enumerate() {
        if i % 2 == 0 {
            prose.push_str(part);
        }
    }
    for link in links(&read("README.md")) {
        prose = prose.replace(&format!("]({link})"), "]");
    }
    let unchecked: BTreeSet<String> = numbers_in(&prose)
        .into_iter()
        .filter(|n| !checked.contains(n))
        .collect();
    assert!(
        unchecked.is_empty(),
        "README quotes numbers no check recomputes: {unchecked:?}"
    );
}

#[test]
fn url_parameters_are_the_parsers() {
    let doc = read("docs/configuration.md");
    let parsers: BTreeMap<&str, BTreeSet<String>> = BTreeMap::from([
        (
            "every one",
            str_list(&read("src/config.rs"), "FACADE_PARAMS"),
        ),
        (
            "redis://",
            str_list(&read("distlock-redis/src/config.rs"), "KNOWN_PARAMS"),
        ),
        (
            "postgres://",
            str_list(&read("distlock-sql/src/config.rs"), "KNOWN_PARAMS"),
        ),
        (
            "zk://",
            str_list(&read("distlock-zk/src/config.rs"), "KNOWN_PARAMS"),
        ),
        (
            "etcd://",
            str_list(&read("distlock-etcd/src/config.rs"), "KNOWN_PARAMS"),
        ),
    ]);
    let mut documented: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut group = "";
    for row in table_after(&doc, "## Every URL parameter") {
        if !row[0].is_empty() {
            group = parsers
                .keys()
                .find(|k| row[0].contains(**k))
                .unwrap_or_else(|| {
                    panic!("docs/configuration.md: unknown scheme cell {:?}", row[0])
                });
        }
        documented
            .entry(group)
            .or_default()
            .insert(row[1].trim_matches('`').to_owned());
    }
    assert_eq!(documented, parsers, "docs/configuration.md vs KNOWN_PARAMS");
    let driver: BTreeSet<String> = code_spans(between(
        &flat(&doc),
        "pass the drivers' own parameters on to sqlx: ",
        ". The path",
    ))
    .into_iter()
    .collect();
    assert_eq!(
        driver,
        str_list(&read("distlock-sql/src/config.rs"), "DRIVER_PARAMS"),
        "docs/configuration.md vs DRIVER_PARAMS"
    );
}

#[test]
fn lock_error_variants_are_the_enum() {
    let src = read("distlock-core/src/error.rs");
    let body = between(&src, "pub enum LockError {", "\n}");
    let variants: BTreeSet<String> = body
        .lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.split(|c: char| !c.is_alphanumeric())
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(variants.len() >= 7, "{variants:?}");
    let s = flat(&read("docs/safety.md"));
    let listed: BTreeSet<String> = code_spans(between(
        &s,
        "One error type, `LockError`",
        "`is_retryable()`",
    ))
    .into_iter()
    .filter(|w| w.chars().all(|c| c.is_ascii_alphanumeric()))
    .filter(|w| w.starts_with(|c: char| c.is_ascii_uppercase()))
    .collect();
    assert_eq!(
        listed, variants,
        "docs/safety.md vs distlock-core/src/error.rs"
    );
}

/// A Rust block in a Markdown file is a doctest only if `src/lib.rs` includes the file; and a
/// fence without a language is Rust to rustdoc.
#[test]
fn every_rust_block_is_compiled() {
    let lib = read("src/lib.rs");
    let mut files = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    const RUSTDOC: &[&str] = &["rust", "no_run", "should_panic", "compile_fail", "ignore"];
    for path in files {
        let rel = path.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let mut fenced = false;
        let mut rust = 0;
        for line in text.lines() {
            let Some(info) = line.trim_start().strip_prefix("```") else {
                continue;
            };
            fenced = !fenced;
            if !fenced {
                continue;
            }
            let words: Vec<&str> = info
                .split(',')
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .collect();
            let is_rust = words
                .iter()
                .all(|w| RUSTDOC.contains(w) || w.starts_with("edition"));
            if is_rust {
                assert!(
                    !words.contains(&"ignore"),
                    "{rel}: a Rust block marked ignore"
                );
                assert!(
                    words.contains(&"rust"),
                    "{rel}: a fence without a language (rustdoc takes it for Rust): ```{info}"
                );
                rust += 1;
            }
        }
        if rust > 0 {
            assert!(
                lib.contains(&format!("include_str!(\"../{rel}\")")),
                "{rel} has {rust} Rust blocks but src/lib.rs does not include it as doctests"
            );
        }
    }
}

/// Every repository path the docs name in code spans, and every relative link (with its
/// anchor), exists.
#[test]
fn paths_and_links_exist() {
    let path_like = |s: &str| {
        s.contains('/')
            && !s.starts_with('/')
            && !s.starts_with("target/")
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
            && (s.ends_with('/')
                || [".rs", ".md", ".sh", ".py", ".lua", ".toml", ".java", ".png"]
                    .iter()
                    .any(|e| s.ends_with(e)))
    };
    let mut missing = Vec::new();
    for doc in DOCS {
        let text = read(doc);
        for span in code_spans(&text) {
            if path_like(&span) && !root().join(&span).exists() {
                missing.push(format!("{doc}: `{span}`"));
            }
        }
        let dir = Path::new(doc).parent().unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                root().join(doc)
            } else {
                root().join(dir).join(file)
            };
            if !target.exists() {
                missing.push(format!("{doc}: link {link}"));
            } else if !anchor.is_empty() {
                let t = std::fs::read_to_string(target).unwrap();
                if !anchors(&t).contains(anchor) {
                    missing.push(format!("{doc}: anchor {link}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "missing: {missing:#?}");
}

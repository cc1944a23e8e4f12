//! The worked example of `distlock exec` with fencing (distlock-cli's README): a shell job
//! passes `DISTLOCK_FENCING_TOKEN` to `psql`, whose transaction calls `distlock_fence` first, so
//! a holder that stalled past its lease cannot overwrite the next holder's row. Real processes,
//! real PostgreSQL from `scripts/services.sh up`, Debian's `psql`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn database_url() -> String {
    std::env::var("DISTLOCK_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:15432/distlock".into())
}

/// The job, as the README has it: fence first, then the write, in one transaction.
const JOB: &str = r#"#!/bin/sh -e
psql "$DATABASE_URL" -q -v ON_ERROR_STOP=1 <<SQL
BEGIN;
SELECT distlock_fence('$RESOURCE', $DISTLOCK_FENCING_TOKEN);
UPDATE $TABLE SET body = '$BODY', token = $DISTLOCK_FENCING_TOKEN WHERE id = 1;
COMMIT;
SQL
"#;

fn psql(sql: &str) -> String {
    let out = Command::new("psql")
        .args([&database_url(), "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql (Debian postgresql-client) is installed by scripts/services.sh up");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn env<'a>(c: &'a mut Command, table: &str, resource: &str, body: &str) -> &'a mut Command {
    c.env("DATABASE_URL", database_url())
        .env("TABLE", table)
        .env("RESOURCE", resource)
        .env("BODY", body)
        .stdin(Stdio::null())
}

/// `distlock exec` runs the job under the lock.
fn exec(job: &Path, name: &str, table: &str, resource: &str, body: &str) -> Output {
    let url = format!("{}?mode=row", database_url());
    let mut c = support::bin();
    env(&mut c, table, resource, body)
        .args([
            "exec", "--url", &url, "--name", name, "--wait", "10s", "--", "sh",
        ])
        .arg(job)
        .output()
        .unwrap()
}

#[tokio::test]
async fn a_stalled_shell_job_is_refused_by_distlock_fence() {
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();
    distlock::fence::sql::postgres::install(&pool)
        .await
        .unwrap();
    let u = support::unique();
    let (table, resource, name) = (
        format!("exec_fence_{u}"),
        format!("job-{u}"),
        format!("fenced-{u}"),
    );
    psql(&format!(
        "CREATE TABLE {table} (id INT PRIMARY KEY, body TEXT NOT NULL, token BIGINT NOT NULL); \
         INSERT INTO {table} VALUES (1, '', 0)"
    ));
    let dir = support::tmp("execfence", "job");
    let job = dir.join("job.sh");
    std::fs::write(&job, JOB).unwrap();

    let first = exec(&job, &name, &table, &resource, "first");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first_token: u64 = psql(&format!("SELECT token FROM {table}")).parse().unwrap();
    let second = exec(&job, &name, &table, &resource, "second");
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let row = psql(&format!("SELECT body || ' ' || token FROM {table}"));
    let second_token: u64 = row.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(second_token > first_token, "{row}");

    // The first holder, stalled past its lease, resumes its job with its old token.
    let mut c = Command::new("sh");
    let stale = env(&mut c, &table, &resource, "stale")
        .env("DISTLOCK_FENCING_TOKEN", first_token.to_string())
        .arg(&job)
        .output()
        .unwrap();
    assert!(!stale.status.success(), "the stale job succeeded");
    let why = String::from_utf8_lossy(&stale.stderr);
    assert!(why.contains("is stale"), "{why}");
    assert_eq!(
        psql(&format!("SELECT body || ' ' || token FROM {table}")),
        row,
        "the stale write landed"
    );
    psql(&format!("DROP TABLE {table}"));
}

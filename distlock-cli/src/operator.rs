//! `distlock ls` (the locks held now, bounded by `--limit`) and `distlock break` (an operator's
//! forced release that advances the name's fence), as text or JSON; what each backend can do is
//! in distlock-cli's README.

use std::io::{BufRead, IsTerminal, Write};

use distlock::{Broken, Listing, LockError, LockInfo};

use crate::exit;
use crate::inspect::{connect_and, info_json, info_lines};

/// Runs `ls`; returns the process exit code.
pub async fn ls(url: &str, prefix: &str, limit: usize, json: bool) -> i32 {
    let (lock, listing) = match connect_and(url, exit::for_operator_error, |lock| async move {
        lock.list(prefix, limit).await
    })
    .await
    {
        Ok(v) => v,
        Err(code) => return code,
    };
    let Listing {
        locks, truncated, ..
    } = listing;
    if json {
        let locks: Vec<_> = locks
            .iter()
            .map(|l| {
                let mut v = info_json(&l.info);
                v["name"] = l.name.as_str().into();
                v
            })
            .collect();
        let v = serde_json::json!({
            "backend": lock.backend_name(),
            "prefix": prefix,
            "limit": limit,
            "truncated": truncated,
            "locks": locks,
        });
        println!("{v}");
    } else {
        for l in &locks {
            println!("{}\t{}", l.name, info_lines(&l.info).join("\t"));
        }
    }
    if truncated {
        eprintln!(
            "distlock: more locks may be held than the {} listed; narrow --prefix or raise --limit",
            locks.len()
        );
    }
    0
}

/// Runs `break`: asks first unless `yes` (refused when stdin is not a terminal); returns the
/// process exit code.
pub async fn break_lock(url: &str, name: &str, yes: bool) -> i32 {
    if !yes && !std::io::stdin().is_terminal() {
        eprintln!(
            "distlock: break asks for confirmation on a terminal; pass --yes to break without asking"
        );
        return exit::USAGE;
    }
    let lock = match connect_and(url, exit::for_operator_error, |_| async { Ok(()) }).await {
        Ok((lock, ())) => lock,
        Err(code) => return code,
    };
    // A backend that cannot break says why below, without asking first.
    if !yes && lock.capabilities().break_lock {
        let info = match lock.inspect(name).await {
            Ok(info) => Some(info),
            Err(LockError::Unsupported { .. }) => None,
            Err(e) => {
                eprintln!("distlock: {e}");
                return exit::for_operator_error(&e);
            }
        };
        if info.as_ref().is_some_and(|i| !i.held) {
            eprintln!(
                "distlock: nobody holds {name} on {}; nothing to break",
                lock.backend_name()
            );
            return exit::NOT_HELD;
        }
        if !confirmed(name, lock.backend_name(), info.as_ref()).await {
            eprintln!("distlock: not confirmed; {name} was left as it is");
            return exit::DECLINED;
        }
    }
    match lock.break_lock(name).await {
        Ok(b) => {
            println!("{}", broken_text(&b, lock.backend_name()));
            0
        }
        // Its own words: NotHeld's message speaks of a guard.
        Err(LockError::NotHeld { reason, .. }) => {
            eprintln!("distlock: {name} on {}: {reason}", lock.backend_name());
            exit::NOT_HELD
        }
        Err(e) => {
            eprintln!("distlock: {e}");
            exit::for_operator_error(&e)
        }
    }
}

/// What was broken, one line.
fn broken_text(b: &Broken, backend: &str) -> String {
    let mut text = format!("broke {} on {backend}", b.name);
    if let Some(t) = b.fencing_token {
        text.push_str(&format!(
            ": fencing token {t} (the next holder's is higher)"
        ));
    }
    if let Some(h) = &b.holder {
        text.push_str(&format!(", holder {h}"));
    }
    if let Some(o) = &b.owner {
        text.push_str(&format!(", owner {o}"));
    }
    text
}

/// Asks on the terminal whether to break `name`, showing its holder: whether the answer was
/// yes.
async fn confirmed(name: &str, backend: &str, info: Option<&LockInfo>) -> bool {
    let mut prompt = format!("Break the lock {name} on {backend}?");
    for line in info.map(info_lines).unwrap_or_default() {
        prompt.push_str(&format!("\n  {line}"));
    }
    prompt.push_str(
        "\nIts holder is told at its next renewal and keeps running until then; only fencing \
         stops its writes. Break it? [y/N] ",
    );
    let answer = tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr();
        let _ = err.write_all(prompt.as_bytes());
        let _ = err.flush();
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await;
    matches!(answer, Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

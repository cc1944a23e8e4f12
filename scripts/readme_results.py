#!/usr/bin/env python3
"""Prints the "Results" tables of docs/bench/README.md from one benchmark run's results.json.

Usage: scripts/readme_results.py DIR/results.json

One row per backend and peer, in the order the run measured them: uncontended cycles/s and its
ratio to the raw primitive, the contended scenario in one process (8 tasks) and across 8
processes (handoffs/s, wait p99, re-takes) and the re-takes across 2, and the violations of all three; then the
semaphore and read-write lock table. A cell the run did not measure is "–". Only reads the
file; docs/bench/README.md is edited by hand with the output.
"""
import json
import sys

# How docs/bench/README.md names each backend label of the run (the store's flavour, where it matters).
LABELS = {
    "sqlite-row": "sqlite-row (`synchronous=FULL`)",
    "mysql-row": "mysql-row (MariaDB)",
    "mysql-for_update": "mysql-for_update (MariaDB)",
    "mysql-advisory": "mysql-advisory (MariaDB)",
    "redlock": "redlock (5 masters)",
    "etcd": "etcd (single member)",
}
# What the raw primitive is, where the figure alone would not say.
RAW = {
    "postgres-advisory": " (lock + unlock)",
    "mysql-advisory": " (`GET_LOCK` + `RELEASE_LOCK`)",
    "etcd": " (put + delete under a lease)",
}


def fmt(v, digits=0):
    if v is None:
        return "–"
    return f"{v:.{digits}f}"


def ms(us):
    return "–" if us is None else f"{us / 1000:.1f}"


def pct(f):
    return "–" if f is None else f"{round(f * 100)}%"


def by_backend(rows, scenarios):
    """{backend: {scenario: row}} for `scenarios`, backends in the order the run measured them;
    the 2-process row of contended-procs (run beside the 8-process one) as "contended-procs-2"."""
    by = {}
    for r in rows:
        if r["scenario"] in scenarios:
            key = r["scenario"]
            if key == "contended-procs" and r.get("param") == 2:
                key = "contended-procs-2"
            by.setdefault(r["backend"], {})[key] = r
    return by


def main(path):
    with open(path) as f:
        rows = json.load(f)
    by = by_backend(rows, ("uncontended", "contended", "contended-procs"))
    print(
        "| backend | uncontended cycles/s | raw primitive/s | lock ÷ raw "
        "| in one process: handoffs/s (8 tasks) | wait p99 ms | re-takes "
        "| across 8 processes: handoffs/s | wait p99 ms | re-takes | 2 processes: re-takes "
        "| violations |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in by:
        s = by[b]
        u, c, p = s.get("uncontended", {}), s.get("contended", {}), s.get("contended-procs", {})
        p2 = s.get("contended-procs-2", {})
        peer = any(r.get("note", "").startswith("peer") for r in s.values())
        name = LABELS.get(b, b) + (" — peer" if peer else "")
        raw = u.get("baseline_ops_per_sec")
        raw_cell = "–" if raw is None else fmt(raw) + RAW.get(b, "")
        violations = sum(r.get("violations") or 0 for r in s.values())
        print(
            f"| {name} | {fmt(u.get('ops_per_sec'))} | {raw_cell} | {fmt(u.get('ratio_vs_baseline'), 2)} "
            f"| {fmt(c.get('ops_per_sec'))} | {ms(c.get('p99_us'))} | {pct(c.get('same_holder_fraction'))} "
            f"| {fmt(p.get('ops_per_sec'))} | {ms(p.get('p99_us'))} | {pct(p.get('same_holder_fraction'))} "
            f"| {pct(p2.get('same_holder_fraction'))} | {violations} |"
        )

    permits(rows)


def permits(rows):
    """The semaphore and read-write lock rows, one line per backend that offers either."""
    by = by_backend(rows, ("semaphore", "rwlock"))
    print()
    print(
        "| backend | semaphore grants/s | wait p99 ms | peak permits out "
        "| read-write grants/s | wait p99 ms | violations |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for b in by:
        sem, rw = by[b].get("semaphore", {}), by[b].get("rwlock", {})
        violations = sum(r.get("violations") or 0 for r in by[b].values())
        print(
            f"| {LABELS.get(b, b)} | {fmt(sem.get('ops_per_sec'))} | {ms(sem.get('p99_us'))} "
            f"| {fmt(sem.get('param'))} | {fmt(rw.get('ops_per_sec'))} | {ms(rw.get('p99_us'))} "
            f"| {violations} |"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/readme_results.py DIR/results.json")
    main(sys.argv[1])

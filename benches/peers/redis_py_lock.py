"""redis-py's `Lock` (the peer a Python user would pick instead of distlock on Redis), measured
the way benches/src/scenarios measure distlock, so the two rows sit side by side in one run.

    python redis_py_lock.py uncontended HOST PORT NAME SECONDS
    python redis_py_lock.py contended   HOST PORT NAME SECONDS WORKERS
    python redis_py_lock.py worker      HOST PORT NAME SECONDS HOLD_MS

Prints one JSON object (the fields of the report's ResultRow); `worker` is one process of the
grid scenario instead: it prints READY, waits for GO on stdin, then takes the lock for SECONDS
(each wait ending with that window), holding it HOLD_MS each time, and prints one
`ACQ 0 asked got releasing` line per acquisition (CLOCK_MONOTONIC ns, as the Rust workers)
and DONE.

What the peer gives up: no
fencing token, no FIFO (a blocked `acquire` polls every `sleep` = 0.1 s, redis-py's default),
no lost-lock signal. Contended workers are threads, each with its own connection; the overlap
check counts holders under a local mutex.
"""

import json
import sys
import threading
import time

import redis


def quantile_us(samples, q):
    if not samples:
        return 0.0
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] * 1e6


# The quantiles of benches/src/stats.rs LADDER.
LADDER = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0]


def worst_share(counts):
    total = sum(counts)
    return 0.0 if total == 0 else min(counts) * len(counts) / total


def jain(counts):
    total = sum(counts)
    sq = sum(c * c for c in counts)
    return 0.0 if sq == 0 else total * total / (len(counts) * sq)


def uncontended(host, port, name, seconds):
    r = redis.Redis(host=host, port=port)
    lat = []
    for _ in range(20):
        lock = r.lock(name, timeout=30)
        lock.acquire()
        lock.release()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        lock = r.lock(name, timeout=30)
        if not lock.acquire(blocking_timeout=10):
            raise SystemExit("uncontended acquire timed out")
        lock.release()
        lat.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - start
    return {
        "scenario": "uncontended",
        "ops_per_sec": len(lat) / elapsed,
        "p50_us": quantile_us(lat, 0.5),
        "p99_us": quantile_us(lat, 0.99),
        "p999_us": quantile_us(lat, 0.999),
    }


def contended(host, port, name, seconds, workers):
    meta = threading.Lock()
    state = {"holders": 0, "violations": 0, "last": None, "same": 0, "handoffs": 0}
    waits, handoffs, counts = [], [], [0] * workers
    end = time.perf_counter() + seconds
    errors = []

    def work(wid):
        r = redis.Redis(host=host, port=port)
        try:
            while time.perf_counter() < end:
                lock = r.lock(name, timeout=30)
                t0 = time.perf_counter()
                if not lock.acquire(blocking_timeout=30):
                    raise RuntimeError("acquire timed out after 30 s")
                got = time.perf_counter()
                with meta:
                    state["holders"] += 1
                    if state["holders"] > 1:
                        state["violations"] += 1
                    waits.append(got - t0)
                    counts[wid] += 1
                    if state["last"] is not None:
                        released, who = state["last"]
                        handoffs.append(got - released)
                        state["handoffs"] += 1
                        if who == wid:
                            state["same"] += 1
                        state["last"] = None
                time.sleep(0)
                with meta:
                    state["holders"] -= 1
                    state["last"] = (time.perf_counter(), wid)
                lock.release()
        except Exception as e:  # reported, never swallowed
            errors.append(repr(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("; ".join(errors))
    elapsed = max(time.perf_counter() - start, seconds)
    return {
        "scenario": "contended",
        "ops_per_sec": sum(counts) / elapsed,
        "p50_us": quantile_us(waits, 0.5),
        "p99_us": quantile_us(waits, 0.99),
        "p999_us": quantile_us(waits, 0.999),
        "same_holder_fraction": state["same"] / max(state["handoffs"], 1),
        "jain_index": jain(counts),
        "worst_share": worst_share(counts),
        "wait_ladder_us": [[q, quantile_us(waits, q)] for q in LADDER],
        "violations": state["violations"],
        "handoff_p50_us": quantile_us(handoffs, 0.5),
        "handoff_p99_us": quantile_us(handoffs, 0.99),
        "param": workers,
    }


def worker(host, port, name, seconds, hold_ms):
    r = redis.Redis(host=host, port=port)
    r.ping()
    print("READY", flush=True)
    sys.stdin.readline()
    end = time.monotonic() + seconds
    lines = []
    while time.monotonic() < end:
        lock = r.lock(name, timeout=30)
        asked = time.monotonic_ns()
        if not lock.acquire(blocking_timeout=max(end - time.monotonic(), 0.001)):
            break
        got = time.monotonic_ns()
        time.sleep(hold_ms / 1000)
        releasing = time.monotonic_ns()
        lock.release()
        lines.append(f"ACQ 0 {asked} {got} {releasing}")
    print("\n".join(lines + ["DONE"]), flush=True)


def main(argv):
    if len(argv) < 6:
        raise SystemExit(__doc__)
    scenario, host, port, name, seconds = argv[1], argv[2], int(argv[3]), argv[4], float(argv[5])
    if scenario == "uncontended":
        row = uncontended(host, port, name, seconds)
    elif scenario == "contended" and len(argv) == 7:
        row = contended(host, port, name, seconds, int(argv[6]))
    elif scenario == "worker" and len(argv) == 7:
        worker(host, port, name, seconds, int(argv[6]))
        return
    else:
        raise SystemExit(__doc__)
    print(json.dumps(row))


if __name__ == "__main__":
    main(sys.argv)

"""A real redis-py `Lock` for distlock-redis/tests/redis_py.rs (interop with distlock's Redis lock on
the same key). Usage: redis_py_participant.py HOST PORT
Reads one command per line on stdin and answers one line on stdout:
  acquire NAME TTL_MS WAIT_MS  -> "held" or "none" (the wait ran out)
  try NAME TTL_MS              -> "held" or "none"
  release                      -> "released", or "not-owned" (redis-py's LockNotOwnedError)
  cycle NAME COUNT HOLD_MS LOG -> COUNT holds in a row, each logged to LOG as "enter <epoch us>"
                                  after the acquire and "leave <epoch us>" before the release;
                                  then "done"
End of stdin exits.
"""

import sys
import time

import redis
from redis.exceptions import LockNotOwnedError


def now_us():
    return time.time_ns() // 1000


def main():
    r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))
    held = None
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] in ("acquire", "try"):
            lock = r.lock(w[1], timeout=int(w[2]) / 1000.0)
            if w[0] == "try":
                ok = lock.acquire(blocking=False)
            else:
                ok = lock.acquire(blocking_timeout=int(w[3]) / 1000.0, sleep=0.01)
            if ok:
                held = lock
            print("held" if ok else "none", flush=True)
        elif w[0] == "release":
            try:
                held.release()
                print("released", flush=True)
            except LockNotOwnedError:
                print("not-owned", flush=True)
            held = None
        elif w[0] == "cycle":
            name, count, hold_ms, log = w[1], int(w[2]), int(w[3]), w[4]
            with open(log, "a") as f:
                for _ in range(count):
                    lock = r.lock(name, timeout=10)
                    if not lock.acquire(blocking_timeout=30, sleep=0.002):
                        print("timeout", flush=True)
                        return
                    f.write("enter %d\n" % now_us())
                    f.flush()
                    time.sleep(hold_ms / 1000.0)
                    f.write("leave %d\n" % now_us())
                    f.flush()
                    lock.release()
            print("done", flush=True)
        else:
            print("unknown command %r" % line, flush=True)


if __name__ == "__main__":
    main()

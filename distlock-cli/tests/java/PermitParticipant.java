// A Curator InterProcessSemaphoreV2 / InterProcessReadWriteLock participant for
// tests/curator_permits.rs (interop with distlock's ZooKeeper semaphore and read-write lock).
// Usage: PermitParticipant CONNECT PATH SESSION_MS
// Reads one command per line on stdin and answers one line on stdout:
//   acquire sem N | acquire read | acquire write   -> "held"
//   try sem N MS  | try read MS  | try write MS    -> "held" or "none"
//   release                                        -> "released" (the latest hold)
//   cycle sem N | cycle read | cycle write, then COUNT HOLD_MS LOG
//       -> COUNT holds in a row, each logged to LOG as "enter <epoch µs>" after the acquire
//          and "leave <epoch µs>" before the release; then "done"
// End of stdin exits.
import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class PermitParticipant {
    interface Hold { void release() throws Exception; }

    static CuratorFramework client;
    static String path;
    static final ArrayDeque<Hold> held = new ArrayDeque<>();

    static long micros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    // Takes what `w` names (w[1..]: "sem N", "read" or "write"), waiting at most `ms` (-1:
    // forever); null when the wait ran out. `next` is the index after the what.
    static Hold take(String[] w, long ms) throws Exception {
        if (w[1].equals("sem")) {
            InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client, path, Integer.parseInt(w[2]));
            Lease lease = ms < 0 ? s.acquire() : s.acquire(ms, TimeUnit.MILLISECONDS);
            return lease == null ? null : lease::close;
        }
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        InterProcessMutex m = w[1].equals("read") ? rw.readLock() : rw.writeLock();
        if (ms < 0) {
            m.acquire();
        } else if (!m.acquire(ms, TimeUnit.MILLISECONDS)) {
            return null;
        }
        return m::release;
    }

    static int after(String[] w) { return w[1].equals("sem") ? 3 : 2; }

    public static void main(String[] args) throws Exception {
        path = args[1];
        client = CuratorFrameworkFactory.newClient(
            args[0], Integer.parseInt(args[2]), 5000, new ExponentialBackoffRetry(100, 3));
        client.start();
        client.blockUntilConnected();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            switch (w[0]) {
                case "acquire":
                    held.push(take(w, -1));
                    System.out.println("held");
                    break;
                case "try": {
                    Hold h = take(w, Long.parseLong(w[after(w)]));
                    if (h != null) held.push(h);
                    System.out.println(h == null ? "none" : "held");
                    break;
                }
                case "release":
                    held.pop().release();
                    System.out.println("released");
                    break;
                case "cycle": {
                    int i = after(w);
                    int count = Integer.parseInt(w[i]);
                    long holdMs = Long.parseLong(w[i + 1]);
                    try (FileWriter log = new FileWriter(w[i + 2], true)) {
                        for (int n = 0; n < count; n++) {
                            Hold h = take(w, -1);
                            log.write("enter " + micros() + "\n");
                            Thread.sleep(holdMs);
                            log.write("leave " + micros() + "\n");
                            log.flush();
                            h.release();
                        }
                    }
                    System.out.println("done");
                    break;
                }
                default:
                    System.out.println("unknown command: " + line);
            }
            System.out.flush();
        }
        client.close();
    }
}

// Apache Curator's InterProcessMutex (the peer a JVM user would pick instead of distlock on
// ZooKeeper), measured the way benches/src/scenarios measure distlock, so the two rows sit side
// by side in one run. Compiled by the benchmark against Debian's jars (libcurator-recipes-java).
//
//   CuratorMutex uncontended CONNECT PATH SECONDS
//   CuratorMutex contended   CONNECT PATH SECONDS WORKERS
//   CuratorMutex worker      CONNECT PATH SECONDS HOLD_MS
//
// Prints one JSON object (the fields of the report's ResultRow); `worker` is one process of the
// grid scenario instead (READY, GO on stdin, one `ACQ 0 asked got releasing` line per
// acquisition on System.nanoTime, which is CLOCK_MONOTONIC as the Rust workers use, and DONE). What the peer gives up: no
// fencing token handed to the caller, no lost-lock signal on the lock itself (a connection
// state listener is the user's job). Contended workers are threads, each with its own
// CuratorFramework client (its own ZooKeeper session); the overlap check counts holders under a
// local mutex.
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorMutex {
    static final Object META = new Object();
    static int holders, violations, same, handoffCount;
    static long lastReleased = -1;
    static int lastWho = -1;
    static final List<Long> waits = new ArrayList<>();
    static final List<Long> handoffs = new ArrayList<>();

    static CuratorFramework client(String connect) throws InterruptedException {
        CuratorFramework c = CuratorFrameworkFactory.newClient(connect, 10_000, 5_000,
            new ExponentialBackoffRetry(100, 3));
        c.start();
        if (!c.blockUntilConnected(10, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no ZooKeeper at " + connect);
        }
        return c;
    }

    static double quantileUs(List<Long> nanos, double q) {
        if (nanos.isEmpty()) return 0.0;
        List<Long> s = new ArrayList<>(nanos);
        Collections.sort(s);
        return s.get(Math.min(s.size() - 1, (int) (q * s.size()))) / 1000.0;
    }

    // The quantiles of benches/src/stats.rs LADDER.
    static final double[] LADDER = {0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0};

    static String ladderJson(List<Long> nanos) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < LADDER.length; i++) {
            if (i > 0) b.append(',');
            b.append(String.format(java.util.Locale.ROOT, "[%f,%f]", LADDER[i], quantileUs(nanos, LADDER[i])));
        }
        return b.append(']').toString();
    }

    static double worstShare(long[] counts) {
        long total = 0, min = Long.MAX_VALUE;
        for (long c : counts) { total += c; min = Math.min(min, c); }
        return total == 0 ? 0 : (double) min * counts.length / total;
    }

    static void worker(String connect, String path, double seconds, long holdMs) throws Exception {
        CuratorFramework c = client(connect);
        InterProcessMutex m = new InterProcessMutex(c, path);
        System.out.println("READY");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        long end = System.nanoTime() + (long) (seconds * 1e9);
        StringBuilder lines = new StringBuilder();
        while (System.nanoTime() < end) {
            long asked = System.nanoTime();
            if (!m.acquire(Math.max(end - asked, 1), TimeUnit.NANOSECONDS)) break;
            long got = System.nanoTime();
            if (holdMs > 0) Thread.sleep(holdMs); else Thread.yield();
            long releasing = System.nanoTime();
            m.release();
            lines.append("ACQ 0 ").append(asked).append(' ').append(got).append(' ').append(releasing).append('\n');
        }
        System.out.print(lines.append("DONE\n"));
        System.out.flush();
        c.close();
    }

    static double jain(long[] counts) {
        double sum = 0, sq = 0;
        for (long c : counts) { sum += c; sq += (double) c * c; }
        return sq == 0 ? 0 : sum * sum / (counts.length * sq);
    }

    static String uncontended(String connect, String path, double seconds) throws Exception {
        CuratorFramework c = client(connect);
        InterProcessMutex m = new InterProcessMutex(c, path);
        for (int i = 0; i < 20; i++) { m.acquire(); m.release(); }
        List<Long> lat = new ArrayList<>();
        long start = System.nanoTime(), end = start + (long) (seconds * 1e9);
        while (System.nanoTime() < end) {
            long t = System.nanoTime();
            if (!m.acquire(10, TimeUnit.SECONDS)) throw new IllegalStateException("acquire timed out");
            m.release();
            lat.add(System.nanoTime() - t);
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        c.close();
        return String.format(java.util.Locale.ROOT,
            "{\"scenario\":\"uncontended\",\"ops_per_sec\":%f,\"p50_us\":%f,\"p99_us\":%f,\"p999_us\":%f}",
            lat.size() / elapsed, quantileUs(lat, 0.5), quantileUs(lat, 0.99), quantileUs(lat, 0.999));
    }

    static String contended(String connect, String path, double seconds, int workers) throws Exception {
        long[] counts = new long[workers];
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < workers; i++) clients.add(client(connect));
        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        long start = System.nanoTime(), end = start + (long) (seconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < workers; i++) {
            final int id = i;
            final InterProcessMutex m = new InterProcessMutex(clients.get(i), path);
            Thread t = new Thread(() -> {
                try {
                    while (System.nanoTime() < end) {
                        long t0 = System.nanoTime();
                        if (!m.acquire(30, TimeUnit.SECONDS)) throw new IllegalStateException("acquire timed out after 30 s");
                        long got = System.nanoTime();
                        synchronized (META) {
                            holders++;
                            if (holders > 1) violations++;
                            waits.add(got - t0);
                            counts[id]++;
                            if (lastReleased >= 0) {
                                handoffs.add(got - lastReleased);
                                handoffCount++;
                                if (lastWho == id) same++;
                                lastReleased = -1;
                            }
                        }
                        Thread.yield();
                        synchronized (META) {
                            holders--;
                            lastReleased = System.nanoTime();
                            lastWho = id;
                        }
                        m.release();
                    }
                } catch (Exception e) {
                    errors.add(e.toString());
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) t.join();
        for (CuratorFramework c : clients) c.close();
        if (!errors.isEmpty()) throw new IllegalStateException(String.join("; ", errors));
        double elapsed = Math.max((System.nanoTime() - start) / 1e9, seconds);
        long total = 0;
        for (long c : counts) total += c;
        return String.format(java.util.Locale.ROOT,
            "{\"scenario\":\"contended\",\"ops_per_sec\":%f,\"p50_us\":%f,\"p99_us\":%f,\"p999_us\":%f,"
                + "\"same_holder_fraction\":%f,\"jain_index\":%f,\"worst_share\":%f,\"violations\":%d,"
                + "\"handoff_p50_us\":%f,\"handoff_p99_us\":%f,\"param\":%d,\"wait_ladder_us\":%s}",
            total / elapsed, quantileUs(waits, 0.5), quantileUs(waits, 0.99), quantileUs(waits, 0.999),
            (double) same / Math.max(handoffCount, 1), jain(counts), worstShare(counts), violations,
            quantileUs(handoffs, 0.5), quantileUs(handoffs, 0.99), workers, ladderJson(waits));
    }

    public static void main(String[] args) throws Exception {
        String row;
        if (args.length == 4 && args[0].equals("uncontended")) {
            row = uncontended(args[1], args[2], Double.parseDouble(args[3]));
        } else if (args.length == 5 && args[0].equals("contended")) {
            row = contended(args[1], args[2], Double.parseDouble(args[3]), Integer.parseInt(args[4]));
        } else if (args.length == 5 && args[0].equals("worker")) {
            worker(args[1], args[2], Double.parseDouble(args[3]), Long.parseLong(args[4]));
            System.exit(0);
            return;
        } else {
            System.err.println("usage: CuratorMutex uncontended CONNECT PATH SECONDS | contended CONNECT PATH SECONDS WORKERS | worker CONNECT PATH SECONDS HOLD_MS");
            System.exit(64);
            return;
        }
        System.out.println(row);
        System.exit(0);
    }
}

// A Curator LeaderLatch participant for tests/curator_election.rs (interop with distlock's
// ZooKeeper election). Usage: LatchParticipant CONNECT LATCH_PATH ID LOG SESSION_MS
// Appends "enter <epoch µs>" to LOG when Curator says it leads and "leave <epoch µs>" when it
// stops leading; a line "resign" on stdin writes "leave" and closes the latch (deleting its
// node); end of stdin exits.
import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.time.Instant;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class LatchParticipant {
    private static String log;

    private static synchronized void record(String what) {
        Instant now = Instant.now();
        long micros = now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
        try (FileWriter w = new FileWriter(log, true)) {
            w.write(what + " " + micros + "\n");
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], id = args[2];
        log = args[3];
        int sessionMs = Integer.parseInt(args[4]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            connect, sessionMs, 5000, new ExponentialBackoffRetry(100, 3));
        client.start();
        client.blockUntilConnected();
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.addListener(new LeaderLatchListener() {
            public void isLeader() { record("enter"); }
            public void notLeader() { record("leave"); }
        });
        latch.start();
        record("started");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().equals("resign")) {
                synchronized (LatchParticipant.class) {
                    if (latch.hasLeadership()) {
                        record("leave");
                    }
                    latch.close();
                }
                record("resigned");
            }
        }
        client.close();
    }
}

// CuratorLatch drives Apache Curator's LeaderLatch for TestCuratorLatchInterop, one
// command per line on stdin, one answer per line on stdout:
//   latch PATH ID   start a LeaderLatch on PATH with participant id ID -> STARTED
//   await MS        wait up to MS ms for leadership                     -> LEADER | TIMEOUT
//   leader          the current leader's id, as the latch reads it      -> ID <id>
//   close           close the latch (resign, or leave the queue)        -> OK
// It prints READY once connected; errors are answered with ERROR <what>.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLatch {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        System.out.println("READY");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        LeaderLatch latch = null;
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split(" ");
            try {
                switch (f[0]) {
                    case "latch":
                        latch = new LeaderLatch(client, f[1], f[2]);
                        latch.start();
                        System.out.println("STARTED");
                        break;
                    case "await":
                        System.out.println(latch.await(Long.parseLong(f[1]), TimeUnit.MILLISECONDS) ? "LEADER" : "TIMEOUT");
                        break;
                    case "leader":
                        System.out.println("ID " + latch.getLeader().getId());
                        break;
                    case "close":
                        latch.close();
                        latch = null;
                        System.out.println("OK");
                        break;
                    default:
                        System.out.println("ERROR unknown command " + f[0]);
                }
            } catch (Exception e) {
                System.out.println("ERROR " + e);
            }
            System.out.flush();
        }
        client.close();
    }
}

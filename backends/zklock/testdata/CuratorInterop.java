// CuratorInterop drives Apache Curator's InterProcessSemaphoreV2 and
// InterProcessReadWriteLock for TestCuratorInterop, one command per line on stdin:
//
//   sem PATH MAX QTY WAITMS   acquire QTY leases of the semaphore at PATH (MAX leases)
//   read PATH WAITMS          acquire the read lock of the read-write lock at PATH
//   write PATH WAITMS         acquire its write lock
//   release                   release everything held
//
// and answers HELD, BUSY (not acquired within WAITMS), OK or ERR <message>. It
// says READY once connected to the ensemble given as its argument.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class CuratorInterop {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], 10000, 5000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        List<Lease> leases = new ArrayList<>();
        List<InterProcessMutex> locks = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        say("READY");
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ");
            try {
                switch (f[0]) {
                    case "sem": {
                        InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client, f[1], Integer.parseInt(f[2]));
                        Collection<Lease> got = s.acquire(Integer.parseInt(f[3]), Long.parseLong(f[4]), TimeUnit.MILLISECONDS);
                        if (got == null) {
                            say("BUSY");
                        } else {
                            leases.addAll(got);
                            say("HELD");
                        }
                        break;
                    }
                    case "read":
                    case "write": {
                        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, f[1]);
                        InterProcessMutex m = f[0].equals("read") ? rw.readLock() : rw.writeLock();
                        if (m.acquire(Long.parseLong(f[2]), TimeUnit.MILLISECONDS)) {
                            locks.add(m);
                            say("HELD");
                        } else {
                            say("BUSY");
                        }
                        break;
                    }
                    case "release":
                        for (Lease l : leases) {
                            l.close();
                        }
                        leases.clear();
                        for (InterProcessMutex m : locks) {
                            m.release();
                        }
                        locks.clear();
                        say("OK");
                        break;
                    default:
                        say("ERR unknown command " + f[0]);
                }
            } catch (Exception e) {
                say("ERR " + e);
            }
        }
        client.close();
    }

    private static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }
}

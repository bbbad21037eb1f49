package zklock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// curatorJars are the jars (Debian's libcurator-recipes-java and what it depends
// on) that the Curator programs of testdata need.
var curatorJars = []string{"curator-client", "curator-framework", "curator-recipes", "zookeeper", "zookeeper-jute",
	"guava", "slf4j-api", "slf4j-nop"}

// curator is a process of a Curator program of testdata (CuratorInterop: the
// semaphore and read-write lock; CuratorLatch: LeaderLatch): Apache Curator's
// recipes, driven line by line.
type curator struct {
	t     *testing.T
	name  string // the program
	stdin *bufio.Writer
	out   chan string
}

// startCurator runs testdata/<program>.java against the ensemble at addrs and waits
// until it is READY.
func startCurator(t *testing.T, program string, addrs []string) *curator {
	t.Helper()
	var cp []string
	for _, j := range curatorJars {
		p := filepath.Join("/usr/share/java", j+".jar")
		if _, err := os.Stat(p); err != nil {
			cp = nil
			break
		}
		cp = append(cp, p)
	}
	java, err := exec.LookPath("java")
	if cp == nil || err != nil {
		msg := "Apache Curator is not installed (java and Debian's libcurator-recipes-java: make deps)"
		if servers.RequireServers() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// java runs a single source file directly (Java 11+): no build step.
	cmd := exec.Command(java, "-cp", strings.Join(cp, ":"), "testdata/"+program+".java", strings.Join(addrs, ","))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &curator{t: t, name: program, stdin: bufio.NewWriter(in), out: make(chan string, 16)}
	go func() {
		defer close(c.out)
		sc := bufio.NewScanner(outPipe)
		for sc.Scan() {
			c.out <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	if got := c.next(); got != "READY" {
		t.Fatalf("%s said %q, want READY", program, got)
	}
	return c
}

func (c *curator) next() string {
	c.t.Helper()
	select {
	case l, ok := <-c.out:
		if !ok {
			c.t.Fatalf("%s exited", c.name)
		}
		return l
	case <-time.After(time.Minute):
		c.t.Fatalf("%s did not answer within a minute", c.name)
	}
	return ""
}

// do sends one command and returns the answer.
func (c *curator) do(format string, args ...any) string {
	c.t.Helper()
	fmt.Fprintf(c.stdin, format+"\n", args...)
	c.stdin.Flush()
	return c.next()
}

// TestCuratorInterop: a Curator client and dlock share one semaphore and one
// read-write lock when Curator is given the key's lock directory (zklock.LockDir):
// each sees the other's holders.
func TestCuratorInterop(t *testing.T) {
	z := servertest.ZooKeeper(t)
	cur := startCurator(t, "CuratorInterop", z.Addrs())
	l, err := dlock.Open(ctxFor(t, 30*time.Second), "zk://"+strings.Join(z.Addrs(), ",")+"/curator-interop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx := ctxFor(t, time.Minute)
	notAcquired := func(what string, ls dlock.Lease, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: granted (token %d)", what, ls.Token())
			_ = ls.Release(ctx)
		} else if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: want ErrNotAcquired, got %v", what, err)
		}
	}

	key := "sem/" + t.Name()
	dir := zklock.LockDir("/curator-interop", key)
	sem, err := dlock.NewSemaphore(l, key, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Curator holds both permits: dlock gets none, then one once Curator releases.
	if got := cur.do("sem %s 2 2 5000", dir); got != "HELD" {
		t.Fatalf("Curator acquiring 2 of 2 leases: %s", got)
	}
	ls, err := sem.TryAcquire(ctx)
	notAcquired("dlock TryAcquire while Curator holds both permits", ls, err)
	if got := cur.do("release"); got != "OK" {
		t.Fatalf("Curator release: %s", got)
	}
	a, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("dlock TryAcquire after Curator released: %v", err)
	}
	// dlock holds one permit: Curator gets the other, not a third.
	if got := cur.do("sem %s 2 1 5000", dir); got != "HELD" {
		t.Errorf("Curator acquiring the second of 2 leases while dlock holds one: %s", got)
	}
	if got := cur.do("sem %s 2 1 300", dir); got != "BUSY" {
		t.Errorf("Curator acquiring a third lease of 2: %s", got)
	}
	// A waiting dlock Acquire is served when Curator releases.
	b, err := sem.TryAcquire(ctx)
	notAcquired("dlock TryAcquire while dlock and Curator hold one permit each", b, err)
	waited := make(chan error, 1)
	go func() {
		ls, err := sem.Acquire(ctx)
		if err == nil {
			err = ls.Release(ctx)
		}
		waited <- err
	}()
	if got := cur.do("release"); got != "OK" {
		t.Fatalf("Curator release: %s", got)
	}
	if err := <-waited; err != nil {
		t.Errorf("dlock Acquire waiting for Curator's permit: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	key = "rw/" + t.Name()
	dir = zklock.LockDir("/curator-interop", key)
	rw, err := dlock.NewRWMutex(l, key)
	if err != nil {
		t.Fatal(err)
	}
	// Curator's write lock keeps dlock's readers and writers out.
	if got := cur.do("write %s 5000", dir); got != "HELD" {
		t.Fatalf("Curator write lock: %s", got)
	}
	ls, err = rw.TryAcquireShared(ctx)
	notAcquired("dlock shared TryAcquire while Curator holds the write lock", ls, err)
	if got := cur.do("release"); got != "OK" {
		t.Fatalf("Curator release: %s", got)
	}
	// dlock's shared lease lets Curator read, not write.
	r, err := rw.TryAcquireShared(ctx)
	if err != nil {
		t.Fatalf("dlock shared TryAcquire on a free lock: %v", err)
	}
	if got := cur.do("read %s 5000", dir); got != "HELD" {
		t.Errorf("Curator read lock beside a dlock reader: %s", got)
	}
	if got := cur.do("release"); got != "OK" {
		t.Fatalf("Curator release: %s", got)
	}
	if got := cur.do("write %s 300", dir); got != "BUSY" {
		t.Errorf("Curator write lock beside a dlock reader: %s", got)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// dlock's exclusive lease keeps Curator's reader out.
	w, err := rw.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("dlock exclusive TryAcquire on a free lock: %v", err)
	}
	if got := cur.do("read %s 300", dir); got != "BUSY" {
		t.Errorf("Curator read lock beside a dlock writer: %s", got)
	}
	if err := w.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

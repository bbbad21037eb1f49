package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// holdPrimitive opens url and takes n leases through take (a semaphore's permits,
// a read-write lock's side), released when t ends.
func holdPrimitive(t *testing.T, url string, n int, take func(l dlock.Locker) (dlock.Lease, error)) {
	t.Helper()
	l, err := dlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for range n {
		if _, err := take(l); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunSemaphore: --limit N takes one of N permits: it runs beside the holders of
// the others, waits (here: gives up, 75) when all are held, and is refused (69,
// "other settings") when the key is held with another limit or as a read-write lock.
func TestRunSemaphore(t *testing.T) {
	url := redisURL(t)
	cmd := []string{"--", childBin, "exit", "0"}
	run := func(key string, flags ...string) (int, string) {
		return runDlock(t, append(append([]string{"run", "--url", url, "--key", key, "--wait", "0"}, flags...), cmd...)...)
	}
	semaphore := func(key string, limit int) func(l dlock.Locker) (dlock.Lease, error) {
		return func(l dlock.Locker) (dlock.Lease, error) {
			s, err := dlock.NewSemaphore(l, key, limit)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(context.Background(), dlock.WithTTL(time.Minute))
		}
	}
	one, full := uniqueKey(t)+"/one", uniqueKey(t)+"/full"
	holdPrimitive(t, url, 1, semaphore(one, 2))
	holdPrimitive(t, url, 2, semaphore(full, 2))
	for _, c := range []struct {
		key   string
		flags []string
		code  int
		want  string
	}{
		{one, []string{"--limit", "2"}, 0, ""},
		{full, []string{"--limit", "2"}, exitTempFail, "not acquired"},
		{full, []string{"--limit", "3"}, exitUnavailable, "other settings"},
		{full, []string{"--shared"}, exitUnavailable, "other settings"},
		{full, nil, 0, ""}, // the key's mutex is another lock
	} {
		if code, stderr := run(c.key, c.flags...); code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v on %s: exit %d, stderr %q; want %d and %q", c.flags, c.key, code, stderr, c.code, c.want)
		}
	}
}

// TestRunReadWrite: --shared runs beside other shared holders, --exclusive does not.
func TestRunReadWrite(t *testing.T) {
	url, key := redisURL(t), uniqueKey(t)
	holdPrimitive(t, url, 1, func(l dlock.Locker) (dlock.Lease, error) {
		m, err := dlock.NewRWMutex(l, key)
		if err != nil {
			return nil, err
		}
		return m.TryAcquireShared(context.Background(), dlock.WithTTL(time.Minute))
	})
	cmd := []string{"--", childBin, "exit", "0"}
	if code, stderr := runDlock(t, append([]string{"run", "--url", url, "--key", key, "--wait", "0", "--shared"}, cmd...)...); code != 0 {
		t.Errorf("--shared beside a shared holder: exit %d, stderr %q", code, stderr)
	}
	if code, stderr := runDlock(t, append([]string{"run", "--url", url, "--key", key, "--wait", "0", "--exclusive"}, cmd...)...); code != exitTempFail {
		t.Errorf("--exclusive beside a shared holder: exit %d, stderr %q; want %d", code, stderr, exitTempFail)
	}
}

func TestRunPrimitiveUsage(t *testing.T) {
	cmd := []string{"--", childBin, "exit", "0"}
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--limit", "-1"}, "--limit must be positive"},
		{[]string{"--limit", "2", "--shared"}, "does not go with"},
		{[]string{"--shared", "--exclusive"}, "give one"},
		{[]string{"--limit", "70000"}, "invalid semaphore limit"},
	} {
		code, stderr := runDlock(t, append(append([]string{"run", "--url", "mem://", "--key", "k"}, c.flags...), cmd...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.flags, code, stderr, exitUsage, c.want)
		}
	}
}

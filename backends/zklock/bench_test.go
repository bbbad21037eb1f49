package zklock_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// BenchmarkAcquireRelease measures one uncontended acquire+release on the shared
// server, for dlock (Acquire and TryAcquire), go-zookeeper's zk.Lock on the same
// kind of directory, and the raw round trips (create an ephemeral sequential node,
// delete it). It reports the p50 and p99 of the cycles as metrics:
//
//	go test -run '^$' -bench AcquireRelease -benchtime 2000x ./backends/zklock/
func BenchmarkAcquireRelease(b *testing.B) {
	z := servertest.ZooKeeper(b)
	conn := connect(b, z.Addrs(), 10*time.Second)
	const root = "/dlock-bench"
	l := zklock.New(conn, zklock.WithRoot(root), zklock.WithSessionTimeout(10*time.Second))
	defer l.Close()
	key := fmt.Sprintf("bench/%d", time.Now().UnixNano())
	dir := zklock.LockDir(root, key)
	acl := zk.WorldACL(zk.PermAll)

	b.Run("dlock-Acquire", func(b *testing.B) {
		cycles(b, func() error {
			ls, err := l.Acquire(b.Context(), key)
			if err != nil {
				return err
			}
			return ls.Release(b.Context())
		})
	})
	b.Run("dlock-TryAcquire", func(b *testing.B) {
		cycles(b, func() error {
			ls, err := l.TryAcquire(b.Context(), key)
			if err != nil {
				return err
			}
			return ls.Release(b.Context())
		})
	})
	// A TryAcquire that finds the key held: create, list, check the holder's node
	// is ephemeral (not a node planted to block the key), delete.
	b.Run("dlock-TryAcquire-busy", func(b *testing.B) {
		busy := fmt.Sprintf("bench-busy/%d", time.Now().UnixNano())
		held, err := l.TryAcquire(b.Context(), busy)
		if err != nil {
			b.Fatal(err)
		}
		defer held.Release(b.Context())
		cycles(b, func() error {
			if _, err := l.TryAcquire(b.Context(), busy); !errors.Is(err, dlock.ErrNotAcquired) {
				return fmt.Errorf("TryAcquire of a held key: %v", err)
			}
			return nil
		})
	})
	b.Run("zk.Lock", func(b *testing.B) {
		cycles(b, func() error {
			zl := zk.NewLock(conn, dir, acl)
			if err := zl.Lock(); err != nil {
				return err
			}
			return zl.Unlock()
		})
	})
	b.Run("raw-create-delete", func(b *testing.B) {
		if _, err := conn.Create(dir+"-raw", nil, zk.FlagPersistent, acl); err != nil && err != zk.ErrNodeExists {
			b.Fatal(err)
		}
		defer conn.Delete(dir+"-raw", -1)
		cycles(b, func() error {
			p, err := conn.Create(dir+"-raw/lock-", nil, zk.FlagEphemeralSequential, acl)
			if err != nil {
				return err
			}
			return conn.Delete(p, -1)
		})
	})
}

// cycles runs f b.N times and reports the p50 and p99 of its durations.
func cycles(b *testing.B, f func() error) {
	d := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

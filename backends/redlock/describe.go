package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// Inspection (dlock.Describe, dlock.List). Each master keeps the bare key with the
// owner value (and the Holder record written into it) and its TTL; there is no
// token, and the waiters' queue (queue.go) is not shown. A key is held where a majority of the
// masters hold one value: its holder is that value, its time left the shortest of
// theirs. A lock a release reserved for a woken waiter (queue.go) shows as free.
// Every master is read in parallel, one pipeline each (the key and the generic
// semaphore's slots), each within describeTimeout; a description needs a
// majority of answers. List scans each master for keys under the prefix (and the
// semaphores' slots) whose value is an owner value.

// describeTimeout bounds one master's read.
const describeTimeout = 2 * time.Second

var _ driver.Describer = (*redlockDriver)(nil)

// seen is what one master holds on one key.
type seen struct {
	value string
	pttl  time.Duration
}

func (d *redlockDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	keys := append([]string{key}, generic.SlotKeys(key)...)
	reads, answered := d.readAll(ctx, keys)
	if answered < d.quorum {
		return nil, fmt.Errorf("%w: %d of %d masters answered, a description needs %d", dlock.ErrUnavailable, answered, len(d.nodes), d.quorum)
	}
	var out []driver.KeyState
	if e, note, ok := d.majority(reads, key, answered); ok || note != "" {
		st := driver.KeyState{Key: key, Kind: driver.KindLock, Note: note}
		if ok {
			st.Holders = []driver.Entry{e}
		}
		out = append(out, st)
	}
	if st, ok := generic.SemaphoreOf(key, func(i int) (driver.Entry, bool) {
		e, _, ok := d.majority(reads, generic.SlotKey(key, i), answered)
		return e, ok
	}); ok {
		out = append(out, st)
	}
	return out, nil
}

// majority returns the holder of k: the value a majority of masters hold, with the
// shortest time left among them. note says how many masters hold it, or, with no
// majority, what the masters hold.
func (d *redlockDriver) majority(reads []map[string]seen, k string, answered int) (driver.Entry, string, bool) {
	count := map[string]int{}
	left := map[string]time.Duration{}
	holding := 0
	for _, r := range reads {
		s, ok := r[k]
		if !ok {
			continue
		}
		holding++
		if n := count[s.value]; n == 0 || s.pttl < left[s.value] {
			left[s.value] = s.pttl
		}
		count[s.value]++
	}
	for v, n := range count {
		if n >= d.quorum {
			owner, h := redisops.OwnerOf(v)
			e := driver.Entry{Owner: owner, TTL: max(left[v], 0), Holder: h}
			if h != nil {
				e.Since = h.Since
			}
			return e, fmt.Sprintf("held on %d of %d masters (%d answered)", n, len(d.nodes), answered), true
		}
	}
	if holding > 0 {
		return driver.Entry{}, fmt.Sprintf("not held: %d of %d masters hold a value, no value on a majority", holding, len(d.nodes)), false
	}
	return driver.Entry{}, "", false
}

// readAll reads keys on every master in parallel: per master, the owner values and
// times left of the keys it holds (nil for a master that did not answer), and how
// many answered.
func (d *redlockDriver) readAll(ctx context.Context, keys []string) ([]map[string]seen, int) {
	reads := make([]map[string]seen, len(d.nodes))
	var wg sync.WaitGroup
	for i := range d.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, describeTimeout)
			defer cancel()
			reads[i] = readMaster(nctx, d.nodes[i].c, keys)
		})
	}
	wg.Wait()
	answered := 0
	for _, r := range reads {
		if r != nil {
			answered++
		}
	}
	return reads, answered
}

// readMaster reads keys on one master in one pipeline: the owner values (keys of
// other types or values are skipped) and their times left; nil when the master
// does not answer.
func readMaster(ctx context.Context, c redis.UniversalClient, keys []string) map[string]seen {
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.DurationCmd, len(keys))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			gets[i], pttls[i] = p.Get(ctx, k), p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !redisops.IsReply(err) {
		return nil
	}
	got := map[string]seen{}
	for i, k := range keys {
		if v, err := gets[i].Result(); err == nil && redisops.IsOwnerValue(v) {
			got[k] = seen{v, pttls[i].Val()}
		}
	}
	return got
}

func (d *redlockDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	names := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(d.nodes))
	for i := range d.nodes {
		wg.Go(func() {
			found := func(k string) {
				name, ok := generic.ParseSlotKey(k)
				if !ok {
					name = k
				}
				if strings.HasPrefix(name, prefix) {
					mu.Lock()
					names[name] = true
					mu.Unlock()
				}
			}
			c := d.nodes[i].c
			errs[i] = redisops.Scan(ctx, c, redisops.Glob(prefix)+"*", found)
			if errs[i] == nil {
				errs[i] = redisops.Scan(ctx, c, "\xffsemaphore\xff*", found)
			}
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if len(d.nodes)-failed < d.quorum {
		return nil, fmt.Errorf("%w: %d of %d masters could be scanned: %w", dlock.ErrUnavailable, len(d.nodes)-failed, len(d.nodes), errors.Join(errs...))
	}
	var out []driver.KeyState
	for _, name := range slices.Sorted(maps.Keys(names)) {
		states, err := d.Describe(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, s := range states {
			if len(s.Holders) > 0 {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

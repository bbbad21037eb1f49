package redislock

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// keyKinds are the store keys a lock, a semaphore or read-write lock, the fair
// mode and an election keep beside the lock's own key (redisops.LockKey, the name
// itself).
var keyKinds = map[string]func(string) string{
	"fence": redisops.FenceKey, "queue": queueKey, "deadline": deadlineKey,
	"election": electionKey, "term": electionTermKey, "log": electionLogKey,
	"holders":   func(k string) string { return primitiveKeys(k)[0] },
	"settings":  func(k string) string { return primitiveKeys(k)[1] },
	"primfence": func(k string) string { return primitiveKeys(k)[2] },
	"wwait":     writerWaitKey,
	"squeue":    func(k string) string { w, _ := semaphoreWaitKeys(k); return w },
	"sqdead":    func(k string) string { _, d := semaphoreWaitKeys(k); return d },
}

// FuzzKeys: for any two valid keys, every store key lies in its key's Redis
// Cluster hash slot, can be no lock's name (it is not valid UTF-8), and gives its
// key back (prefix, hash tag, key): two keys that differ, or two kinds of key,
// never share a store key.
func FuzzKeys(f *testing.F) {
	for i, k := range primKeys {
		f.Add(k, primKeys[(i+1)%len(primKeys)])
	}
	f.Add("a}b", "{16}a}b")
	f.Add("{}x", "{x}")
	f.Fuzz(func(t *testing.T, a, b string) {
		if dlock.ValidateKey(a) != nil || dlock.ValidateKey(b) != nil {
			return
		}
		seen := map[string]string{redisops.LockKey(a): "lock " + a}
		if a != b {
			if redisops.LockKey(b) == redisops.LockKey(a) {
				t.Fatalf("keys %q and %q share the lock key", a, b)
			}
			seen[redisops.LockKey(b)] = "lock " + b
		}
		for kind, of := range keyKinds {
			for _, k := range []string{a, b} {
				sk := of(k)
				if redisops.Slot(sk) != redisops.Slot(k) {
					t.Fatalf("%s key of %q, %q: slot %d, the key's is %d", kind, k, sk, redisops.Slot(sk), redisops.Slot(k))
				}
				if utf8.ValidString(sk) {
					t.Fatalf("%s key of %q, %q, is valid UTF-8: a lock could be named like it", kind, k, sk)
				}
				if got := keyOf(t, sk); got != k {
					t.Fatalf("%s key of %q, %q, gives the key %q back", kind, k, sk, got)
				}
				if other, dup := seen[sk]; dup && other != kind+" "+k {
					t.Fatalf("%s key of %q and %s share %q", kind, k, other, sk)
				}
				seen[sk] = kind + " " + k
			}
		}
	})
}

// keyOf reads the key back from a store key: prefix (up to the byte 0xff), "{",
// a hash tag without '}', "}", the key.
func keyOf(t *testing.T, sk string) string {
	t.Helper()
	i := strings.IndexByte(sk, 0xff)
	if i < 0 || i+1 >= len(sk) || sk[i+1] != '{' {
		t.Fatalf("store key %q: no prefix and tag", sk)
	}
	j := strings.IndexByte(sk[i+2:], '}')
	if j < 0 {
		t.Fatalf("store key %q: the tag is not closed", sk)
	}
	return sk[i+2+j+1:]
}

package redislock

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// primKeys are keys whose hash slot depends on braces, those that cannot have a hash
// tag of their own included (backends/internal/redisops tests every such case for the
// lock's own keys).
var primKeys = []string{"plain", "{tag}x", "x{tag}", "{}", "{}x", "}{a}", "a}b", "{a}}", "{{a}", "é{ü}", "🔒}",
	strings.Repeat("}", 255), strings.Repeat("{", 254) + "}"}

func TestPrimitiveKeysSameSlot(t *testing.T) {
	seen := map[string]string{}
	for _, k := range primKeys {
		waiters, deadlines := semaphoreWaitKeys(k)
		for _, pk := range append(primitiveKeys(k), writerWaitKey(k), waiters, deadlines) {
			if redisops.Slot(pk) != redisops.Slot(k) {
				t.Errorf("primitiveKeys(%q): %q is in slot %d, the lock's is %d", k, pk, redisops.Slot(pk), redisops.Slot(k))
			}
			if utf8.ValidString(pk) {
				t.Errorf("primitiveKeys(%q): %q is valid UTF-8: a mutex could be named like it", k, pk)
			}
			if other, dup := seen[pk]; dup {
				t.Errorf("%q and %q share the primitive key %q", k, other, pk)
			}
			seen[pk] = k
		}
	}
}

// TestFairNames: the fair mode's keys, cut from one string, are the keys each
// function makes on its own, for keys with and without hash tags.
func TestFairNames(t *testing.T) {
	for _, k := range primKeys {
		for _, v := range []string{"", "owner", "\xff{x}"} {
			keys, channel := fairNames(k, v)
			want := [5]string{redisops.LockKey(k), redisops.FenceKey(k), queueKey(k), deadlineKey(k), redisops.ReleasedKey(k, v)}
			if keys != want {
				t.Errorf("fairNames(%q, %q) = %q, want %q", k, v, keys, want)
			}
			if channel != redisops.Channel(k) {
				t.Errorf("fairNames(%q, %q): channel %q, want %q", k, v, channel, redisops.Channel(k))
			}
		}
	}
}

package zklock

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
)

// checkSegment fails unless seg is one ZooKeeper path segment that decodes to key.
func checkSegment(t *testing.T, key, seg string) {
	t.Helper()
	if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/.") {
		t.Fatalf("EscapeKey(%q) = %q: not a usable single segment", key, seg)
	}
	for i := 0; i < len(seg); i++ {
		if c := seg[i]; !keep(c) && c != '%' {
			t.Fatalf("EscapeKey(%q) = %q: byte %q is outside [A-Za-z0-9_%%-]", key, seg, c)
		}
	}
	if len(seg) > 3*dlock.MaxKeyLen {
		t.Fatalf("EscapeKey(%q) is %d bytes", key, len(seg))
	}
	if back, ok := unescapeKey(seg); !ok || back != key {
		t.Fatalf("EscapeKey(%q) = %q decodes to %q (ok %v): not injective", key, seg, back, ok)
	}
}

func TestUnescapeKeyRefuses(t *testing.T) {
	// Segments EscapeKey never makes: other nodes under the root.
	for _, seg := range []string{"", ".elections", "a.b", "%2f", "%41", "%4", "a%", "%ZZ", "%FF"} {
		if key, ok := unescapeKey(seg); ok {
			t.Errorf("unescapeKey(%q) = %q, want no key", seg, key)
		}
	}
}

func TestEscapeKey(t *testing.T) {
	for key, want := range map[string]string{
		"plain-key_1": "plain-key_1",
		"/":           "%2F",
		".":           "%2E",
		"..":          "%2E%2E",
		"a/b":         "a%2Fb",
		"a%2Fb":       "a%252Fb", // "%" is escaped too, so this differs from "a/b"
		"a\x00b":      "a%00b",
		"zookeeper":   "zookeeper", // only reserved directly under "/", which cannot be a root
		"🔒":           "%F0%9F%94%92",
	} {
		if got := EscapeKey(key); got != want {
			t.Errorf("EscapeKey(%q) = %q, want %q", key, got, want)
		}
		checkSegment(t, key, EscapeKey(key))
	}
	seen := map[string]string{}
	for _, k := range conformance.ValidKeys() {
		seg := EscapeKey(k)
		checkSegment(t, k, seg)
		if other, dup := seen[seg]; dup {
			t.Errorf("keys %q and %q share the segment %q", k, other, seg)
		}
		seen[seg] = k
	}
}

func FuzzEscapeKey(f *testing.F) {
	for _, k := range conformance.ValidKeys() {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if len(key) == 0 || len(key) > dlock.MaxKeyLen || !utf8.ValidString(key) {
			return
		}
		checkSegment(t, key, EscapeKey(key))
	})
}

func TestValidateRoot(t *testing.T) {
	for _, ok := range []string{"/dlock", "/a/b", "/a.b", "/x/zookeeper", "/ключ"} {
		if err := validateRoot(ok); err != nil {
			t.Errorf("validateRoot(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/", "dlock", "/dlock/", "/a//b", "/a/./b", "/a/..", "/zookeeper", "/zookeeper/x", "/a\x00", "/a\x1f", "/🔒"} {
		if err := validateRoot(bad); err == nil {
			t.Errorf("validateRoot(%q): want an error", bad)
		}
	}
}

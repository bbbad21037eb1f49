package redisops

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// braceKeys are keys whose hash slot depends on braces, including every way a key
// can fail to have a hash tag while containing '}'.
var braceKeys = []string{
	"plain", "{tag}", "{tag}x", "x{tag}", "tag", "{}", "{}x", "x{}", "}", "}{", "}{a}", "a}b",
	"{a}}", "{{a}", "{", "a{b", "a{b}c{d}e", "{}{a}", "}}}", "{{}}", "é{ü}", "{🔒}", "🔒}",
	strings.Repeat("}", 255), strings.Repeat("{", 254) + "}",
}

func TestSlotKnownValues(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{"123456789": 0x31c3 % Slots, "foo": 12182, "{user1000}.following": 3443, "{user1000}.followers": 3443} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if got := crc16("123456789"); got != 0x31c3 {
		t.Errorf("crc16 check value: %#x, want 0x31c3 (CRC-16/XMODEM)", got)
	}
}

func TestFenceKeySameSlot(t *testing.T) {
	for _, k := range braceKeys {
		f := FenceKey(k)
		if Slot(f) != Slot(k) {
			t.Errorf("FenceKey(%q) = %q: slot %d, the lock's is %d", k, f, Slot(f), Slot(k))
		}
		if utf8.ValidString(f) {
			t.Errorf("FenceKey(%q) = %q is valid UTF-8: a lock could be named like it", k, f)
		}
		if HashedPart(f) == f {
			t.Errorf("FenceKey(%q) = %q has no hash tag", k, f)
		}
	}
}

func TestFenceKeysDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, k := range braceKeys {
		f := FenceKey(k)
		if other, dup := seen[f]; dup {
			t.Errorf("%q and %q share the fence key %q", k, other, f)
		}
		seen[f] = k
	}
}

func TestSlotTagsCoverEverySlot(t *testing.T) {
	for s := range Slots {
		tag := SlotTag(s)
		if strings.ContainsAny(tag, "{}") || tag == "" {
			t.Fatalf("SlotTag(%d) = %q", s, tag)
		}
		if got := Slot("{" + tag + "}"); got != s {
			t.Fatalf("SlotTag(%d) = %q hashes to %d", s, tag, got)
		}
	}
}

package zklock

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escaping a key into one ZooKeeper path segment.
//
// ZooKeeper reserves "/" (the separator), the segments "." and "..", NUL, control
// characters and several Unicode ranges; its Java server also rejects characters
// outside the Basic Multilingual Plane (they are surrogate pairs in UTF-16). A
// dlock key may contain any of these. EscapeKey therefore keeps the bytes
// [A-Za-z0-9_-] and writes every other byte as %XX (upper-case hex). The result
// is injective (percent-decoding gives the key back, and "%" itself is escaped),
// never empty, never "." or ".." (dots are escaped), free of "/" and of anything
// ZooKeeper rejects, and at most 3 × 255 = 765 bytes long for the longest key:
// ZooKeeper has no per-segment length limit (a request is limited by
// jute.maxbuffer, 1 MiB by default).

const hexDigits = "0123456789ABCDEF"

func keep(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-'
}

// EscapeKey returns the single path segment that names key's lock directory under
// the root: bytes outside [A-Za-z0-9_-] become %XX. Two different keys always give
// two different segments. It does not validate key (dlock does that first).
func EscapeKey(key string) string {
	n := 0
	for i := 0; i < len(key); i++ {
		if !keep(key[i]) {
			n++
		}
	}
	if n == 0 {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 2*n)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// unescapeKey returns the key that EscapeKey turns into seg; ok is false for a
// segment EscapeKey never makes (another node under the root).
func unescapeKey(seg string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case keep(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(seg):
			n, err := strconv.ParseUint(seg[i+1:i+3], 16, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(n))
			i += 2
		default:
			return "", false
		}
	}
	key := b.String()
	return key, key != "" && utf8.ValidString(key) && EscapeKey(key) == seg
}

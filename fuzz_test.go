package dlock_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: ParseURL, ParseQuery and the bounded readers of Query, and every
// registered scheme's declaration (its URL parser, which contacts no server), on
// any input: no panic; errors wrap ErrInvalidURL and show neither a password nor a
// value of a malformed query; what the readers accept lies within their bounds.
func FuzzParseURL(f *testing.F) {
	for _, s := range urlfuzz.Seeds {
		f.Add(s)
	}
	for _, s := range []string{"x://h?a=" + urlfuzz.Password + ";b=1", "x://h?a=%zz" + urlfuzz.Password, "x://h?a&a=" + urlfuzz.Password,
		"x://h?n=9223372036854775808&d=2562047h47m16.854775808s&f=1e309", "x://h?d=-0s&f=-0&n=-0", "x://u:" + urlfuzz.Password + "@h:%zz"} {
		f.Add(s)
	}
	known := []string{"a", "b", "n", "d", "f", "fifo"}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := dlock.ParseURL(raw)
		if err != nil {
			if !errors.Is(err, dlock.ErrInvalidURL) {
				t.Fatalf("ParseURL: %v, not ErrInvalidURL", err)
			}
			if strings.Contains(raw, "@") && strings.Contains(err.Error(), urlfuzz.Marker) {
				t.Fatalf("ParseURL of a URL with user information quotes it: %v", err)
			}
			return
		}
		q, err := dlock.ParseQuery(u, known...)
		if err != nil {
			if !errors.Is(err, dlock.ErrInvalidURL) {
				t.Fatalf("ParseQuery: %v, not ErrInvalidURL", err)
			}
			// Errors name parameters, never values.
			for pair := range strings.SplitSeq(u.RawQuery, "&") {
				k, v, _ := strings.Cut(pair, "=")
				k, _, _ = strings.Cut(k, ";")
				if strings.Contains(v, urlfuzz.Marker) && !strings.Contains(k, urlfuzz.Marker) && strings.Contains(err.Error(), urlfuzz.Marker) {
					t.Fatalf("ParseQuery's error shows a value: %v", err)
				}
			}
		} else {
			for k := range q {
				if !strings.Contains(strings.Join(known, " "), k) {
					t.Fatalf("ParseQuery returned the unknown parameter %q", k)
				}
				checkReaders(t, q, k)
			}
		}
		// Every scheme's parser on this URL's rest.
		_, rest, _ := strings.Cut(raw, ":")
		for _, s := range dlock.Schemes() {
			su, err := dlock.ParseURL(s + ":" + rest)
			if err != nil {
				continue
			}
			_, err = dlock.Declared(su)
			if err != nil && !errors.Is(err, errors.ErrUnsupported) {
				urlfuzz.CheckErr(t, raw, err)
			}
		}
	})
}

// checkReaders reads parameter k of q with each bounded reader: each accepts a value
// only within its bounds, and refuses with ErrInvalidURL naming k.
func checkReaders(t *testing.T, q dlock.Query, k string) {
	t.Helper()
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), k) {
			t.Fatalf("%s(%q=%q): %v, want ErrInvalidURL naming the parameter", what, k, q[k], err)
		}
	}
	if d, err := q.Duration(k, 0, time.Millisecond, time.Hour); err != nil {
		refused("Duration", err)
	} else if d < time.Millisecond || d > time.Hour {
		t.Fatalf("Duration(%q=%q) = %v, outside [1ms, 1h]", k, q[k], d)
	}
	if n, err := q.Int(k, 0, -5, 5); err != nil {
		refused("Int", err)
	} else if n < -5 || n > 5 {
		t.Fatalf("Int(%q=%q) = %d, outside [-5, 5]", k, q[k], n)
	}
	if x, err := q.Float(k, 0, 0, 0.5); err != nil {
		refused("Float", err)
	} else if math.IsNaN(x) || x < 0 || x > 0.5 {
		t.Fatalf("Float(%q=%q) = %v, outside [0, 0.5]", k, q[k], x)
	}
	if _, err := q.Bool(k, false); err != nil {
		refused("Bool", err)
	}
}

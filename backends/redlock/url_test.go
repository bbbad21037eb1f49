package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestOpenRejects(t *testing.T) {
	for _, u := range []string{
		"redlock://",
		"redlock://127.0.0.1:1,127.0.0.1:1",
		"redlock://127.0.0.1",
		"redlock://127.0.0.1:1?db=2",
		"redlock://127.0.0.1:1?node_timeout=fast",
		"redlock://127.0.0.1:1?node_timeout=-1s",
		"redlock://127.0.0.1:1?drift_factor=0.01",
		"redlock://127.0.0.1:1?drift_factor=2&drift_fixed=2ms",
		"redlock://127.0.0.1:1?drift_factor=0.01&drift_fixed=soon",
		"redlock://127.0.0.1:1/x",
	} {
		if l, err := dlock.Open(ctxFor(t, 10*time.Second), u); !errors.Is(err, dlock.ErrInvalidURL) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%q): want ErrInvalidURL, got %v", u, err)
		}
	}
}

func TestOpen(t *testing.T) {
	rs := privateMasters(t, masters, false)
	l, err := dlock.Open(ctxFor(t, 10*time.Second), url(rs)+"?node_timeout=200ms&drift_factor=0.5&drift_fixed=0s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const ttl = 400 * time.Millisecond
	t0 := time.Now()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), key(t), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := holders(t, rs, key(t)); n < 3 {
		t.Fatalf("granted, but only %d masters hold the key", n)
	}
	<-ls.Done()
	// drift_factor=0.5: the validity is half the TTL.
	if lasted := time.Since(t0); lasted > ttl*3/4 {
		t.Errorf("with drift_factor=0.5 a %v lease lasted %v, want about %v", ttl, lasted, ttl/2)
	}

	// A majority down: Open fails, naming the masters.
	kill(t, rs[0], rs[1], rs[2])
	_, err = dlock.Open(ctxFor(t, 30*time.Second), url(rs))
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), rs[0].Addr()) {
		t.Fatalf("Open with 3 of 5 masters down: want ErrUnavailable naming %s, got %v", rs[0].Addr(), err)
	}
}

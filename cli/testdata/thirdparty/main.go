// Command thirdparty is a dlock binary with one more backend: "tiny://", a small
// in-process lock store written only with dlock's exported API (dlock.Register,
// dlock.New, package driver, package spec), as a backend in another module would be.
// TestThirdPartyBackend runs `check --url tiny://` on it.
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cli"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/spec"
)

func init() {
	dlock.Register(dlock.Scheme{
		Name: "tiny",
		Open: func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
			if err := check(u); err != nil {
				return nil, err
			}
			return dlock.New(tinyDriver{}, driver.Info{Name: "tiny"}), nil
		},
		Declare: func(u *url.URL) (spec.Capabilities, error) {
			if err := check(u); err != nil {
				return spec.Capabilities{}, err
			}
			return spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true}, nil
		},
	})
}

func check(u *url.URL) error {
	if u.Host != "" || u.Path != "" {
		return fmt.Errorf("%w: tiny:// takes no host or path", dlock.ErrInvalidURL)
	}
	_, err := dlock.ParseQuery(u)
	return err
}

// store is the process's one lock space: every tiny:// Locker shares it.
var store = struct {
	sync.Mutex
	held  map[string]*tinyLock
	token uint64
}{held: map[string]*tinyLock{}}

type tinyDriver struct{}

func (tinyDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	store.Lock()
	defer store.Unlock()
	now := time.Now()
	if h, ok := store.held[key]; ok && now.Before(h.expires) {
		return nil, driver.Busy(h.expires.Sub(now))
	}
	store.token++
	l := &tinyLock{key: key, token: store.token, expires: now.Add(ttl)}
	store.held[key] = l
	return l, nil
}

func (tinyDriver) Close() error { return nil }

type tinyLock struct {
	key     string
	token   uint64
	expires time.Time // guarded by store
}

func (l *tinyLock) Token() uint64 { return l.token }

// ours reports whether l still holds its key; the caller holds store.
func (l *tinyLock) ours() bool {
	return store.held[l.key] == l && time.Now().Before(l.expires)
}

func (l *tinyLock) Refresh(ctx context.Context, ttl time.Duration) error {
	store.Lock()
	defer store.Unlock()
	if !l.ours() {
		return dlock.ErrNotHeld
	}
	l.expires = time.Now().Add(ttl)
	return nil
}

// broken makes Unlock free the key whoever holds it (TINY_BROKEN=1): the negative
// control that shows `check` failing.
var broken = os.Getenv("TINY_BROKEN") == "1"

func (l *tinyLock) Unlock(ctx context.Context) error {
	store.Lock()
	defer store.Unlock()
	if !l.ours() && !broken {
		return dlock.ErrNotHeld
	}
	delete(store.held, l.key)
	return nil
}

func main() { os.Exit(cli.Main(os.Args[1:])) }

package dlock

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Opener opens a Locker for a URL of its scheme. The Locker it returns is ready to use
// (connected, with whatever the backend needs created) and its Close closes what the
// opener opened.
type Opener func(ctx context.Context, u *url.URL) (Locker, error)

var registry struct {
	sync.RWMutex
	m map[string]Opener
}

// Register makes a URL scheme available to Open. Backend packages call it from init;
// a blank import of the package registers its schemes. Registering a scheme twice or
// a nil opener panics: it is a programming error, found at start-up.
func Register(scheme string, open Opener) {
	registry.Lock()
	defer registry.Unlock()
	if open == nil {
		panic("dlock: Register of a nil Opener for scheme " + scheme)
	}
	if registry.m == nil {
		registry.m = map[string]Opener{}
	}
	if _, dup := registry.m[scheme]; dup {
		panic("dlock: Register called twice for scheme " + scheme)
	}
	registry.m[scheme] = open
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.m))
	for k := range registry.m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open returns a Locker for rawURL, e.g. "redis://127.0.0.1:6379" or "mem://". The
// scheme's backend package must have been imported (a blank import is enough). It
// returns ErrInvalidURL for a URL it cannot parse, an unknown scheme or a query
// parameter the backend does not know, and the backend's error (wrapped) when it
// cannot connect.
func Open(ctx context.Context, rawURL string) (Locker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme (want one of %s)", ErrInvalidURL, rawURL, strings.Join(Schemes(), ", "))
	}
	registry.RLock()
	open := registry.m[u.Scheme]
	registry.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w: unknown scheme %q (registered: %s; is the backend package imported?)",
			ErrInvalidURL, u.Scheme, strings.Join(Schemes(), ", "))
	}
	return open(ctx, u)
}

// CheckQuery returns an error wrapping ErrInvalidURL that names the first query
// parameter of u not in known. URL openers use it to reject what they do not
// understand instead of ignoring it.
func CheckQuery(u *url.URL, known ...string) error {
	q := u.Query()
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return fmt.Errorf("%w: unknown query parameter %q (scheme %s takes none)", ErrInvalidURL, k, u.Scheme)
			}
			return fmt.Errorf("%w: unknown query parameter %q (scheme %s takes %s)", ErrInvalidURL, k, u.Scheme, strings.Join(known, ", "))
		}
	}
	return nil
}

package main

import (
	"testing"

	"github.com/dlock-go/dlock/internal/schemetest"
)

// peerURLs gives, for every peer scheme dlock-lab registers, a URL its opener accepts
// (no server answers at 127.0.0.1:1) and one query parameter it knows ("" for none).
// The backends' schemes are the root package's tests' (open_test.go).
var peerURLs = map[string]schemetest.Example{
	"peer+bsm":        {"peer+bsm://127.0.0.1:1", ""},
	"peer+etcd":       {"peer+etcd://127.0.0.1:1", "session_ttl=5"},
	"peer+getlock":    {"peer+getlock://u@127.0.0.1:1/db", ""},
	"peer+pgadvisory": {"peer+pgadvisory://u@127.0.0.1:1/db", ""},
	"peer+redsync":    {"peer+redsync://127.0.0.1:1", ""},
	"peer+zk":         {"peer+zk://127.0.0.1:1", "session_timeout=5s"},
}

// onlyPeers runs check on the peer schemes (those the root package's tests do not).
func onlyPeers(check func(t *testing.T, scheme string, e schemetest.Example)) func(t *testing.T, scheme string, e schemetest.Example) {
	return func(t *testing.T, scheme string, e schemetest.Example) {
		if _, peer := peerURLs[scheme]; !peer {
			t.Skip("a backend's scheme: checked by the root package's tests")
		}
		check(t, scheme, e)
	}
}

// TestPeerStrictQuery: every peer scheme's query is as strict as a backend's: a
// malformed, repeated or unknown parameter is ErrInvalidURL naming it.
func TestPeerStrictQuery(t *testing.T) {
	schemetest.Every(t, withBackends(), onlyPeers(schemetest.StrictQuery))
}

// TestPeerNoSecretInErrors: no error of a peer's opener shows a password.
func TestPeerNoSecretInErrors(t *testing.T) {
	schemetest.Every(t, withBackends(), onlyPeers(schemetest.NoSecret))
}

// withBackends is peerURLs with an empty example for every other registered scheme
// (skipped by onlyPeers).
func withBackends() map[string]schemetest.Example {
	m := map[string]schemetest.Example{}
	for _, s := range []string{"mem", "etcd", "mysql", "mysql+getlock", "postgres", "postgresql", "postgres+advisory", "redis", "rediss", "redis+setnx", "redlock", "zk"} {
		m[s] = schemetest.Example{}
	}
	for s, e := range peerURLs {
		m[s] = e
	}
	return m
}

// peerBounds are the bounds of every peer scheme's query parameters (the TLS
// parameters' are schemetest.TLSBounds).
var peerBounds = map[string]map[string]schemetest.Bound{
	"peer+bsm":        {},
	"peer+etcd":       {"session_ttl": {OK: []string{"1", "86400"}, Bad: []string{"0", "86401", "9300000000"}, Want: "from 1 to 86400"}},
	"peer+getlock":    {},
	"peer+pgadvisory": {},
	"peer+redsync":    {},
	"peer+zk":         {"session_timeout": schemetest.SessionTimeoutBounds},
}

// TestPeerBounds: every query parameter of every peer scheme has a floor and a
// ceiling, or a stated reason it needs none, as a backend's (TestBoundsEveryScheme).
func TestPeerBounds(t *testing.T) {
	schemetest.Every(t, withBackends(), onlyPeers(schemetest.Bounds(peerBounds)))
}

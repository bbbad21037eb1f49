package zkpeer

import (
	"context"
	"net/url"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lab/peers/internal/peerurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+zk://h1:2181[,h2:2181,…][/root]?session_timeout=10s. The path, if any, is the
// root (WithRoot, default DefaultRoot); session_timeout is a Go duration from 100ms
// to 24h (default 10s). The Locker's Close closes the session.
const Scheme = "peer+zk"

// The bounds of session_timeout, as for zk:// (the same client library): below
// 100ms go-zookeeper may not wait long enough for the answer to its connect (below
// 1ms it never does); the protocol's int32 of milliseconds wraps at 596h.
const (
	minSessionTimeout = 100 * time.Millisecond
	maxSessionTimeout = 24 * time.Hour
)

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

// parseURL returns the hosts, session timeout and options of u.
func parseURL(u *url.URL) ([]string, time.Duration, []Option, error) {
	q, err := dlock.ParseQuery(u, "session_timeout")
	if err != nil {
		return nil, 0, nil, err
	}
	hosts, err := peerurl.Hosts(u)
	if err != nil {
		return nil, 0, nil, err
	}
	timeout, err := q.Duration("session_timeout", DefaultSessionTimeout, minSessionTimeout, maxSessionTimeout)
	if err != nil {
		return nil, 0, nil, err
	}
	var opts []Option
	if u.Path != "" && u.Path != "/" {
		opts = append(opts, WithRoot(u.Path))
	}
	return hosts, timeout, opts, nil
}

func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	hosts, timeout, opts, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	return New(hosts, timeout, opts...)
}

// declare: locks as long as the session, no fencing. A lost session is not reported
// to the holder (DoneAndErr, DeadlockFreedom), a cancelled wait stays queued
// (Cancellation), and keys are paths taken as given (KeyIsolation,
// InputValidation). A cut-off holder hears of its session's expiry only on
// reconnecting, after the server gave the lock away (Partition). The library has no
// try: TryAcquire on a free key calls Lock, so the contenders of a simultaneous try
// that lose wait in Lock for the winner's release (SimultaneousTry).
func declare(u *url.URL) (spec.Capabilities, error) {
	_, timeout, _, err := parseURL(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{SessionTimeout: timeout, Weaknesses: []spec.Property{spec.DeadlockFreedom, spec.SimultaneousTry, spec.Cancellation,
		spec.KeyIsolation, spec.InputValidation, spec.DoneAndErr},
		HarnessOnly: []spec.Property{spec.DeadlockFreedom, spec.DoneAndErr},
		// zk.Lock's Unlock takes no context, and a hung store's session loss is heard
		// of only on reconnecting (StoreHang).
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.Partition: spec.Violated, spec.StoreHang: spec.Violated}}, nil
}

package etcdpeer

import (
	"context"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lab/peers/internal/peerurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+etcd://h1:2379[,h2:2379,…][/prefix]?session_ttl=60. The path, if any, is the
// prefix (WithPrefix, with a trailing "/"); session_ttl is WithSessionTTL in seconds
// (1 to 86400).
// The opener makes a client and the session; the Locker's Close closes both.
const Scheme = "peer+etcd"

// maxSessionTTL is the longest session_ttl, in seconds: a day, as long as a crashed
// holder's locks should outlive it (etcd's own limit, 9e9 s, would overflow a
// Duration in the declaration). The floor is 1: the server raises a shorter TTL to
// its minimum.
const maxSessionTTL = 24 * 60 * 60

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

// parseURL returns the hosts, options and session TTL (seconds) of u.
func parseURL(u *url.URL) ([]string, []Option, int, error) {
	q, err := dlock.ParseQuery(u, "session_ttl")
	if err != nil {
		return nil, nil, 0, err
	}
	hosts, err := peerurl.Hosts(u)
	if err != nil {
		return nil, nil, 0, err
	}
	opts := []Option{}
	if u.Path != "" && u.Path != "/" {
		opts = append(opts, WithPrefix(u.Path+"/"))
	}
	ttl, err := q.Int("session_ttl", DefaultSessionTTL, 1, maxSessionTTL)
	if err != nil {
		return nil, nil, 0, err
	}
	if _, ok := q["session_ttl"]; ok {
		opts = append(opts, WithSessionTTL(ttl))
	}
	return hosts, opts, ttl, nil
}

func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	hosts, opts, _, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: hosts, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcdpeer: %w", err)
	}
	l, err := New(ctx, cli, opts...)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return peerurl.Owning(l, cli.Close), nil
}

// declare: fencing by revision, locks as long as the session, waiters ordered by
// revision (FIFO). Empty keys are accepted (InputValidation) and Unlock does not tell
// a holder its lock was deleted (OwnerOnlyRelease). A cut-off holder's Session.Done
// closes up to a second after the server revoked its lease (clientv3 checks
// keep-alive deadlines once a second), so another session may be granted the lock
// first: in some trials of Partition, not all. A Lock whose context ends while the
// request creating its key is in flight returns the context's error without knowing
// whether the key was created: when it was, the key stays, held by the session, and
// the next client is refused (the strict Cancellation, in some runs: 1 trial of 40
// at load 1.2).
func declare(u *url.URL) (spec.Capabilities, error) {
	_, _, ttl, err := parseURL(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{Fencing: true, SessionTimeout: time.Duration(ttl) * time.Second,
		Weaknesses:    []spec.Property{spec.InputValidation, spec.OwnerOnlyRelease},
		HarnessOnly:   []spec.Property{spec.OwnerOnlyRelease},
		SometimesWeak: []spec.Property{spec.Cancellation},
		FIFO:          true,
		// Close revokes the session's lease and waits for the answer up to the session
		// TTL; a hung store's session ends a second late (StoreHang).
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.Partition: spec.Sometimes, spec.StoreHang: spec.Violated},
		FaultTrials:   map[spec.Scenario]int{spec.Partition: 8}}, nil
}

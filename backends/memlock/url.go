package memlock

import (
	"context"
	"fmt"
	"net/url"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open: "mem://", a
// Locker on the process-wide default Store. It takes no host, path or parameter.
const Scheme = "mem"

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	if err := parseURL(u); err != nil {
		return nil, err
	}
	return New(), nil
}

func parseURL(u *url.URL) error {
	if u.Host != "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%w: mem:// takes no host, user or path", dlock.ErrInvalidURL)
	}
	_, err := dlock.ParseQuery(u)
	return err
}

// declare: every property holds; waiters queue (FIFO). There are no servers to
// fault. Semaphores and read-write locks are native, fenced, queued in arrival
// order; a waiting exclusive acquirer keeps later shared ones out. Elections are the
// Store's own (every term recorded for observers); sets of keys are taken key by key.
func declare(u *url.URL) (spec.Capabilities, error) {
	if err := parseURL(u); err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, FIFO: true,
		Semaphore: &spec.Primitive{Native: true, Fencing: true, FIFO: true},
		RWLock:    &spec.Primitive{Native: true, Fencing: true, FIFO: true, WriterPreference: true},
		Election:  &spec.Primitive{Native: true, Fencing: true},
		MultiKey:  &spec.Primitive{Fencing: true}}, nil
}

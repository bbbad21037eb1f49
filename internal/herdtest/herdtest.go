// Package herdtest helps the herd tests: many waiters, each handing the lock on as
// soon as it is granted, so that a test can count what each hand-off costs the
// store. It is a package of its own, apart from locktest, so that the report's
// cells of backends without herd tests do not depend on it (a cell is bound to the
// source its test binary was built from).
package herdtest

import (
	"context"

	"github.com/dlock-go/dlock"
)

// Churn starts a goroutine per Locker of ls that takes a lease with take and
// releases it as soon as it is granted, rounds times (stopping at the first error),
// and then sends its outcome on the returned channel: one value per Locker. The
// herd tests use it: each of many waiters hands the lock on at once.
func Churn(ls []dlock.Locker, rounds int, take func(dlock.Locker) (dlock.Lease, error)) <-chan error {
	done := make(chan error, len(ls))
	for _, l := range ls {
		go func() {
			var err error
			for range rounds {
				var lease dlock.Lease
				if lease, err = take(l); err != nil {
					break
				}
				if err = lease.Release(context.Background()); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	return done
}

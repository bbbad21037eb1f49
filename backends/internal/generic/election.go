package generic

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// TermSource is what WatchTerms reads of a store that keeps an election's terms in a
// table (a row a term, numbered): its live leader, and the terms after a number.
type TermSource struct {
	// Last returns the highest term number recorded (0 for none).
	Last func(ctx context.Context) (uint64, error)
	// Leader returns the live leader, or an error wrapping dlock.ErrNoLeader.
	Leader func(ctx context.Context) (driver.Leader, error)
	// After returns the terms numbered above after, in order.
	After func(ctx context.Context, after uint64) ([]driver.Leader, error)
}

// WatchTerms is driver.Observer's WatchLeaders over a TermSource: it reports the live
// leader when its term is above after, then every later term, reading them whenever
// wake delivers (nil: never) and at least every poll, until ctx ends (ctx.Err()) or
// the store fails (that error). A term is reported at most once, in order; terms
// that came and went between two reads are all reported, since each has its row.
func WatchTerms(ctx context.Context, src TermSource, after uint64, wake <-chan struct{}, poll time.Duration, found func(driver.Leader)) error {
	last, err := src.Last(ctx)
	if err != nil {
		return err
	}
	if l, err := src.Leader(ctx); err == nil && l.Token > after {
		found(l)
		after = l.Token
	} else if err != nil && !errors.Is(err, dlock.ErrNoLeader) {
		return err
	}
	after = max(after, last)
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-wake:
		}
		terms, err := src.After(ctx, after)
		if err != nil {
			return err
		}
		for _, l := range terms {
			found(l)
			after = l.Token
		}
	}
}

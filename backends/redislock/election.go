package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// Leader election (dlock.NewElection): a term is a lock on the election's own key
// (electionKey: no mutex is named like it) whose value is the owner value
// followed by the leader's value, taken by one script that also counts the term
// (its fencing token) and logs it in a stream. Refresh and resign are the mutex's
// owner-checked scripts; a resignation wakes waiting candidates through the
// release channel. Observers read the stream, so they see every term (the stream
// keeps about logLength of them, and expires one TTL after its latest: an
// observer that falls further behind misses terms, and learns of the live leader
// from its term key).

var (
	_ driver.Elector          = (*redisDriver)(nil)
	_ driver.CampaignNotifier = (*redisDriver)(nil)
)

// observeBlock bounds each wait of an observer for new terms, so that it notices
// the end of its context that soon even on a client without context deadlines.
const observeBlock = time.Second

func (d *redisDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	owner := redisops.NewValue()
	key := electionKey(name)
	var token uint64
	var remaining time.Duration
	var won bool
	err := d.write(ctx, key, func(s redis.Scripter) (bool, error) {
		var err error
		token, remaining, won, err = runCampaign(ctx, s, name, owner, value, ttl)
		return won, err
	})
	if err != nil {
		if won || !redisops.IsReply(err) {
			d.cleanup(key, owner+value)
		}
		return nil, err
	}
	if !won {
		return nil, driver.Busy(remaining)
	}
	return &redisLock{d: d, key: key, value: owner + value, token: token}, nil
}

// CampaignWake is the key whose release channel announces the end of a term.
func (d *redisDriver) CampaignWake(name string) string { return electionKey(name) }

func (d *redisDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	value, token, ok, err := readLeader(ctx, d.c, name)
	switch {
	case err != nil:
		return driver.Leader{}, err
	case !ok:
		return driver.Leader{}, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
	}
	return driver.Leader{Value: value, Token: token}, nil
}

// WatchLeaders reports the current leader, then every term logged after it.
func (d *redisDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	// The log's end is read before the leader: a term that begins in between is in
	// the log after that end.
	from, err := lastLogID(ctx, d.c, name)
	if err != nil {
		return err
	}
	switch l, err := d.Leader(ctx, name); {
	case err == nil && l.Token > after:
		found(l)
		after = l.Token
	case err != nil && !errors.Is(err, dlock.ErrNoLeader):
		return err
	}
	for ctx.Err() == nil {
		terms, err := readLog(ctx, d.c, name, from, observeBlock)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		if len(terms) == 0 {
			// Nothing logged for a while: the log expires one TTL after its latest
			// entry, which a long term (or a slow observer) outlives. The live
			// leader, if newer, is reported from its term key.
			switch l, err := d.Leader(ctx, name); {
			case err == nil && l.Token > after:
				found(l)
				after = l.Token
			case err != nil && !errors.Is(err, dlock.ErrNoLeader) && ctx.Err() == nil:
				return err
			}
			continue
		}
		for _, t := range terms {
			from = t.ID
			if t.Token > after {
				found(driver.Leader{Value: t.Value, Token: t.Token})
				after = t.Token
			}
		}
	}
	return ctx.Err()
}

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
// (its fencing token) and logs it in a stream. Refresh is the mutex's owner-checked
// script. Waiting candidates (Campaign) are kept in the store by arrival; a
// resignation wakes the first of them alone, through its own channel, so a term's
// end costs the same requests however many wait. A free term does not go past a
// candidate that has waited DefaultBargeWindow or longer, but there is no strict
// order. Observers read the stream, so they see every term (the stream keeps about
// logLength of them, and expires one TTL after its latest: an observer that falls
// further behind misses terms, and learns of the live leader from its term key).

var (
	_ driver.Elector          = (*redisDriver)(nil)
	_ driver.CampaignWaiter   = (*redisDriver)(nil)
	_ driver.CampaignNotifier = (*redisDriver)(nil)
)

// observeBlock bounds each wait of an observer for new terms, so that it notices
// the end of its context that soon even on a client without context deadlines.
const observeBlock = time.Second

func (d *redisDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	c := &candidate{d: d, name: name, owner: redisops.NewValue(), value: value}
	lk, remaining, err := c.attempt(ctx, ttl, false)
	if lk == nil && err == nil {
		return nil, driver.Busy(remaining)
	}
	return lk, err
}

// Campaign waits among election name's candidates (driver.CampaignWaiter): woken
// by a resignation that names it, looking again every third of ttl (which keeps
// its place: a candidate that stops asking is dropped after ttl) and when the
// term's TTL runs out. When ctx ends it leaves, and a wake-up meant for it goes to
// the next candidate.
func (d *redisDriver) Campaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	c := &candidate{d: d, name: name, owner: redisops.NewValue(), value: value}
	return waitTurn(ctx, ttl,
		func(ctx context.Context) (driver.Lock, fairResult, error) {
			lk, remaining, err := c.attempt(ctx, ttl, true)
			return lk, fairResult{Holder: remaining}, err
		},
		func(ctx context.Context) (<-chan struct{}, func(), error) {
			return d.releases.SubscribeTurn(ctx, electionKey(name), c.owner)
		},
		c.cleanup)
}

// candidate is one campaign of election name, and the term it wins.
type candidate struct {
	d                  *redisDriver
	name, owner, value string
}

// attempt runs campaign.lua once (wait: as a waiting candidate); on an error after
// which the script may have run it resigns (and leaves the candidates).
func (c *candidate) attempt(ctx context.Context, ttl time.Duration, wait bool) (driver.Lock, time.Duration, error) {
	key := electionKey(c.name)
	var token uint64
	var remaining time.Duration
	var won bool
	sent := time.Now()
	err := c.d.write(ctx, key, func(s redis.Scripter) (bool, error) {
		var err error
		token, remaining, won, err = runCampaign(ctx, s, c.name, c.owner, c.value, ttl, wait)
		return won, err
	})
	if err != nil {
		leaveIfSent(err, won, wait, c.cleanup)
		return nil, remaining, err
	}
	if !won {
		return nil, remaining, nil
	}
	return &term{redisLock{d: c.d, key: key, value: c.owner + c.value, token: token, validFrom: sent}, c}, 0, nil
}

// cleanup resigns and leaves the candidates, best effort, with a fresh context.
func (c *candidate) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = resignOp(ctx, c.d.c, c.name, c.owner, c.value)
}

// term is a won election: refreshed as a mutex is, ended by resign.lua.
type term struct {
	redisLock
	c *candidate
}

func (t *term) Unlock(ctx context.Context) error {
	return heldUnless(resignOp(ctx, t.d.c, t.c.name, t.c.owner, t.c.value))
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

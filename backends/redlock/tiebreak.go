// The tie-break of a split vote. Clients that ask for a free lock at the same moment
// can split the masters between them so that none has a majority: each would give up,
// and the lock stay free while everyone who wanted it failed (a scheduled job firing
// on every node at once would run on none). One master, the key's gate (chosen by the
// key's hash, the same for every client), breaks the tie: the contender that holds the
// gate keeps what it was granted and claims the rest, while every other contender
// gives its grants back (step 4) — so the masters it lacks come free within a round
// trip and it reaches a majority. The gate is a master like any other: whoever holds
// it is decided by SET-if-absent there, so exactly one contender holds it, and mutual
// exclusion still rests on the majority alone.
//
// Uncontended, nothing of this runs: a won round is one parallel round trip, as
// before. A lost round reads which value holds each master (vote.lua returns it) and
// claims only when no other value holds a majority of the masters that answered, so
// that TryAcquire on a held lock still answers after one round.

package redlock

import (
	"context"
	_ "embed"
	"errors"
	"hash/fnv"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

var (
	//go:embed vote.lua
	voteSrc    string
	voteScript = newScript(voteSrc)
)

// voteCall lays out the acquire vote for value (acquireVote), once for every master
// of a round: vote.lua, or with q wait.lua, which also keeps q's place in key's
// queue of waiters. Without q it also lays out SET NX PX (call.set), which a
// master runs in a fraction of the script's time: a free lock's vote (setVote).
func voteCall(key, value string, ttl time.Duration, q *queued) scriptCall {
	ms := any(redisops.Millis(ttl))
	if q == nil {
		c := newCallRoom(voteScript, 6, []string{redisops.LockKey(key)}, value, ms)
		a := c.args[3:] // key, value, ms, boxed once for both
		c.set = append(c.args[len(c.args):], "set", a[0], a[1], "nx", "px", a[2])
		return c
	}
	return newCall(waitScript, q.keys, value, ms, q.name, q.arrival, ms)
}

// acquireVote sends call (voteCall) to master i: yes, or no with the holder's value
// and remaining TTL, or failed.
func (d *redlockDriver) acquireVote(ctx context.Context, i int, call scriptCall) vote {
	c := d.nodes[i].c
	if call.set != nil {
		if v, done := setVote(ctx, c, call); done {
			return v
		}
	}
	res, err := call.run(ctx, c)
	if err != nil {
		return vote{answer: failed, err: err}
	}
	if other, ok := res.([]any); ok && len(other) == 2 {
		holder, _ := other[0].(string)
		pttl, _ := other[1].(int64)
		return vote{answer: no, holder: holder, remaining: max(time.Duration(pttl)*time.Millisecond, 0)}
	}
	return vote{answer: yes}
}

// setVote is the vote of a TryAcquire round as one command: SET NX PX takes the lock
// if it is free (a fraction of vote.lua's time on the master). Refused, it returns
// done false: the caller then runs vote.lua, which tells our own value (a request
// retried after a lost reply: yes) from another holder's (no, with its value and
// remaining time), or takes the lock if it was freed meanwhile.
func setVote(ctx context.Context, c redis.UniversalClient, call scriptCall) (v vote, done bool) {
	err := c.Do(ctx, call.set...).Err()
	switch {
	case err == nil:
		return vote{answer: yes}, true
	case errors.Is(err, redis.Nil):
		return vote{}, false
	}
	return vote{answer: failed, err: err}, true
}

// gate returns the index of key's gate master.
func (d *redlockDriver) gate(key string) int { return gateIndex(key, len(d.nodes)) }

// gateIndex is the gate of key among n masters: FNV-1a of the key, modulo n.
func gateIndex(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// majorityHolder reports whether some other value holds key on a majority of the
// masters whose answers are known (r.final, for the masters in ended).
func (d *redlockDriver) majorityHolder(votes []vote) bool {
	count := map[string]int{}
	for _, v := range votes {
		if v.answer == no {
			if count[v.holder]++; count[v.holder] >= d.quorum {
				return true
			}
		}
	}
	return false
}

// ended returns the final votes of the masters whose requests of r have ended.
func ended(r *round) []vote {
	var out []vote
	for i, ch := range r.ended {
		select {
		case <-ch:
			out = append(out, r.final[i])
		default:
		}
	}
	return out
}

// holdsSplitGate reports whether a lost round r was a split vote that this contender
// breaks: it holds key's gate and no other value holds a majority. It waits (at most
// longest) for the gate's answer when the round was decided without it — unless the
// answers already show another holder's majority.
func (d *redlockDriver) holdsSplitGate(r *round, key string, longest time.Duration) bool {
	if d.majorityHolder(r.votes) {
		return false
	}
	g := d.gate(key)
	waitAtMost(r.ended[g], longest)
	select {
	case <-r.ended[g]:
	default:
		return false
	}
	return r.final[g].answer == yes && !d.majorityHolder(ended(r))
}

// claim takes the masters the gate holder lacks: it asks each of them again until a
// majority holds value, or the answers show another value with a majority, or the
// claim window (twice longest, within the lease's validity) ends. It returns the lock,
// or nil after giving back (and announcing) whatever it held.
func (d *redlockDriver) claim(ctx context.Context, first *round, key, value string, ttl time.Duration, start time.Time, longest time.Duration, q *queued, call scriptCall) *lock {
	timeout := d.nodeTimeout(ttl)
	deadline := time.Now().Add(2 * longest)
	if valid := start.Add(ttl - d.cfg.drift(ttl)); valid.Before(deadline) {
		deadline = valid
	}
	waitAtMost(first.settled, longest) // every first answer is in: what we hold is known
	have := make([]bool, len(d.nodes))
	for _, v := range ended(first) {
		have[v.node] = v.answer == yes
	}
	pause := time.Millisecond
	for ctx.Err() == nil && time.Now().Before(deadline) {
		had := slices.Clone(have)
		r := d.poll(ctx, timeout, func(ctx context.Context, i int) vote {
			if had[i] {
				return vote{answer: yes}
			}
			return d.acquireVote(ctx, i, call)
		}, nil)
		waitAtMost(r.settled, longest)
		votes := ended(r)
		for _, v := range votes {
			have[v.node] = have[v.node] || v.answer == yes
		}
		held := 0
		for _, h := range have {
			if h {
				held++
			}
		}
		if held >= d.quorum {
			return d.newLock(key, value, ttl, start, r.ended, longest, q)
		}
		if d.majorityHolder(votes) {
			break
		}
		// The contenders that lost give their grants back within a round trip: look
		// again shortly (nothing announces a withdrawal).
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		pause = min(2*pause, 8*time.Millisecond)
	}
	d.releaseAll(ctx, key, value, ttl, timeout, longest)
	return nil
}

// releaseAll deletes key on every master where it holds value, announcing it, and
// waits for the answers (at most longest). It runs whether or not ctx has ended (a
// claim given up because the Acquire's ctx ended must still give its grants back).
func (d *redlockDriver) releaseAll(ctx context.Context, key, value string, ttl, timeout, longest time.Duration) {
	call := releaseCall(key, value, "", timeout)
	r := d.pollAll(context.WithoutCancel(ctx), timeout, releaseWait{until: time.Now().Add(ttl)}, func(ctx context.Context, i int) vote {
		return d.releaseNode(ctx, i, call)
	})
	waitAtMost(r.settled, longest)
}

package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// Election layout. For the election named name (a valid dlock key), all in the hash
// slot of name (as FenceKey is in its key's):
//
//	term:    "dlock:election\xff{" + tag + "}" + name  (a string: owner value + the leader's value; expires with the term)
//	counter: "dlock:eterm\xff{" + tag + "}" + name     (the last term's token, never expires)
//	log:     "dlock:elog\xff{" + tag + "}" + name      (a stream: one entry per term, token and value;
//	                                                   about logLength entries, expiring one TTL after the latest)
//	candidates: "dlock:equeue\xff{" + tag + "}" + name (the waiting candidates: a sorted set, owner value → arrival in µs)
//	deadlines:  "dlock:eqdead\xff{" + tag + "}" + name (a sorted set, owner value → when it counts as gone, ms)
//
// No mutex is named like them (the byte 0xff is not valid UTF-8), and the election's
// releases are announced on Channel(term key). Once its last term has ended, an
// election keeps only its counter (an integer, like a mutex's fencing counter): the
// counter is what makes a later term's token larger than every earlier one's, and a
// stale leader's token may wait in a protected resource for any length of time, so
// no expiry of it would be safe. The log (up to logLength entries of up to
// dlock.MaxValueLen bytes) and the term go with their TTL.

// Prefixes of the election keys.
const (
	electionPrefix     = "dlock:election\xff"
	electionTermPrefix = "dlock:eterm\xff"
	electionLogPrefix  = "dlock:elog\xff"
)

// candidatesKeys returns the keys of election name's waiting candidates and of
// their deadlines.
func candidatesKeys(name string) (candidates, deadlines string) {
	return redisops.Tagged("dlock:equeue\xff", name), redisops.Tagged("dlock:eqdead\xff", name)
}

// electionKey returns the key that holds election name's current term.
func electionKey(name string) string { return redisops.Tagged(electionPrefix, name) }

// electionTermKey returns the key of election name's term counter.
func electionTermKey(name string) string { return redisops.Tagged(electionTermPrefix, name) }

// electionLogKey returns the stream that logs election name's terms.
func electionLogKey(name string) string { return redisops.Tagged(electionLogPrefix, name) }

// ownerLen is the length of an owner value (NewValue).
const ownerLen = 32

// logLength is about how many terms an election's log keeps (XADD MAXLEN ~); the
// log expires one term's TTL after its latest entry.
const logLength = 1000

// runCampaign makes name's leader the owner value with value for ttl if nobody leads
// and no candidate that has waited DefaultBargeWindow comes first, counting the term
// and logging it in the same script; with wait, a candidate that is not elected
// joins (or stays among) the waiting candidates for ttl (campaign.lua). It returns
// won true and the term's token, or won false and how long until a look may find
// otherwise (the leader's remaining TTL, or the place of the candidate that comes
// first). As with Acquire, an error may come after the script ran: a caller that
// gives up must resign (resignOp) with owner and value.
func runCampaign(ctx context.Context, c redis.Scripter, name, owner, value string, ttl time.Duration, wait bool) (token uint64, remaining time.Duration, won bool, err error) {
	op := ""
	if wait {
		op = "wait"
	}
	candidates, deadlines := candidatesKeys(name)
	res, err := campaignScript.Run(ctx, c, []string{electionKey(name), electionTermKey(name), electionLogKey(name), candidates, deadlines},
		owner+value, redisops.Millis(ttl), value, logLength, owner, op, DefaultBargeWindow.Microseconds()).Int64Slice()
	if err != nil {
		return 0, 0, false, err
	}
	if len(res) != 2 {
		return 0, 0, false, fmt.Errorf("campaign script returned %v, want 2 integers", res)
	}
	if res[0] == 1 {
		return uint64(res[1]), 0, true, nil
	}
	return 0, max(time.Duration(res[1])*time.Millisecond, 0), false, nil
}

// resignOp ends election name's term if owner (with value) holds it, and takes
// owner out of the waiting candidates; when the term is then free it wakes the
// first waiting candidate alone, on its own channel (TurnChannel(electionKey(name),
// candidate)). It reports whether it ended the term — also when run again after its
// reply was lost (resign.lua).
func resignOp(ctx context.Context, c redis.Scripter, name, owner, value string) (bool, error) {
	key := electionKey(name)
	candidates, deadlines := candidatesKeys(name)
	n, err := resignScript.Run(ctx, c, []string{key, redisops.ReleasedKey(key, owner+value), candidates, deadlines},
		owner+value, redisops.Channel(key), owner).Int64()
	return n == 1, err
}

// readLeader returns election name's current leader: its value and token, and ok
// false when nobody leads. One MGET: the term and its counter are read together.
func readLeader(ctx context.Context, c redis.Cmdable, name string) (value string, token uint64, ok bool, err error) {
	vs, err := c.MGet(ctx, electionKey(name), electionTermKey(name)).Result()
	if err != nil {
		return "", 0, false, err
	}
	term, _ := vs[0].(string)
	count, _ := vs[1].(string)
	if vs[0] == nil || len(term) < ownerLen {
		return "", 0, false, nil
	}
	token, err = strconv.ParseUint(count, 10, 64)
	if err != nil {
		return "", 0, false, fmt.Errorf("term counter of election %q: %q", name, count)
	}
	return term[ownerLen:], token, true, nil
}

// logEntry is one term from an election's log.
type logEntry struct {
	ID    string
	Token uint64
	Value string
}

// lastLogID returns the ID of the newest entry of election name's log ("0-0" if
// there is none).
func lastLogID(ctx context.Context, c redis.Cmdable, name string) (string, error) {
	ents, err := c.XRevRangeN(ctx, electionLogKey(name), "+", "-", 1).Result()
	if err != nil || len(ents) == 0 {
		return "0-0", err
	}
	return ents[0].ID, nil
}

// readLog returns the terms logged for election name after the entry with ID from,
// waiting up to block for one; none (and no error) when none came.
func readLog(ctx context.Context, c redis.Cmdable, name, from string, block time.Duration) ([]logEntry, error) {
	res, err := c.XRead(ctx, &redis.XReadArgs{Streams: []string{electionLogKey(name), from}, Block: block, Count: 100}).Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []logEntry
	for _, st := range res {
		for _, m := range st.Messages {
			tok, _ := m.Values["token"].(string)
			val, _ := m.Values["value"].(string)
			n, err := strconv.ParseUint(tok, 10, 64)
			if err != nil {
				return out, fmt.Errorf("log entry %s of election %q has token %q", m.ID, name, tok)
			}
			out = append(out, logEntry{ID: m.ID, Token: n, Value: val})
		}
	}
	return out, nil
}

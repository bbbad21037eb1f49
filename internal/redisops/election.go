package redisops

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Election layout. For the election named name (a valid dlock key), all in the hash
// slot of name (as FenceKey is in its key's):
//
//	term:    "dlock:election\xff{" + tag + "}" + name  (a string: owner value + the leader's value)
//	counter: "dlock:eterm\xff{" + tag + "}" + name     (the last term's token, never expires)
//	log:     "dlock:elog\xff{" + tag + "}" + name      (a stream: one entry per term, token and value)
//
// No mutex is named like them (the byte 0xff is not valid UTF-8), and the election's
// releases are announced on Channel(term key).

// Prefixes of the election keys.
const (
	ElectionPrefix     = "dlock:election\xff"
	ElectionTermPrefix = "dlock:eterm\xff"
	ElectionLogPrefix  = "dlock:elog\xff"
)

// ElectionKey returns the key that holds election name's current term.
func ElectionKey(name string) string { return tagged(ElectionPrefix, name) }

// ElectionTermKey returns the key of election name's term counter.
func ElectionTermKey(name string) string { return tagged(ElectionTermPrefix, name) }

// ElectionLogKey returns the stream that logs election name's terms.
func ElectionLogKey(name string) string { return tagged(ElectionLogPrefix, name) }

// OwnerLen is the length of an owner value (NewValue).
const OwnerLen = 32

// LogLength is about how many terms an election's log keeps (XADD MAXLEN ~).
const LogLength = 1000

var (
	//go:embed campaign.lua
	campaignSrc    string
	campaignScript = redis.NewScript(campaignSrc)
)

// Campaign makes name's leader the owner value with value for ttl if nobody leads,
// counting the term and logging it in the same script. It returns won true and the
// term's token, or won false and the leader's remaining TTL. As with Acquire, an
// error may come after the script ran: a caller that gives up must Release
// ElectionKey(name) with owner+value.
func Campaign(ctx context.Context, c redis.Scripter, name, owner, value string, ttl time.Duration) (token uint64, remaining time.Duration, won bool, err error) {
	res, err := campaignScript.Run(ctx, c, []string{ElectionKey(name), ElectionTermKey(name), ElectionLogKey(name)},
		owner+value, Millis(ttl), value, LogLength).Int64Slice()
	if err != nil {
		return 0, 0, false, err
	}
	if len(res) != 2 {
		return 0, 0, false, fmt.Errorf("redisops: campaign script returned %v, want 2 integers", res)
	}
	if res[0] == 1 {
		return uint64(res[1]), 0, true, nil
	}
	return 0, max(time.Duration(res[1])*time.Millisecond, 0), false, nil
}

// Leader returns election name's current leader: its value and token, and ok
// false when nobody leads. One MGET: the term and its counter are read together.
func Leader(ctx context.Context, c redis.Cmdable, name string) (value string, token uint64, ok bool, err error) {
	vs, err := c.MGet(ctx, ElectionKey(name), ElectionTermKey(name)).Result()
	if err != nil {
		return "", 0, false, err
	}
	term, _ := vs[0].(string)
	count, _ := vs[1].(string)
	if vs[0] == nil || len(term) < OwnerLen {
		return "", 0, false, nil
	}
	token, err = strconv.ParseUint(count, 10, 64)
	if err != nil {
		return "", 0, false, fmt.Errorf("redisops: term counter of election %q: %q", name, count)
	}
	return term[OwnerLen:], token, true, nil
}

// LogEntry is one term from an election's log.
type LogEntry struct {
	ID    string
	Token uint64
	Value string
}

// LastLogID returns the ID of the newest entry of election name's log ("0-0" if
// there is none).
func LastLogID(ctx context.Context, c redis.Cmdable, name string) (string, error) {
	ents, err := c.XRevRangeN(ctx, ElectionLogKey(name), "+", "-", 1).Result()
	if err != nil || len(ents) == 0 {
		return "0-0", err
	}
	return ents[0].ID, nil
}

// ReadLog returns the terms logged for election name after the entry with ID from,
// waiting up to block for one; none (and no error) when none came.
func ReadLog(ctx context.Context, c redis.Cmdable, name, from string, block time.Duration) ([]LogEntry, error) {
	res, err := c.XRead(ctx, &redis.XReadArgs{Streams: []string{ElectionLogKey(name), from}, Block: block, Count: 100}).Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []LogEntry
	for _, st := range res {
		for _, m := range st.Messages {
			tok, _ := m.Values["token"].(string)
			val, _ := m.Values["value"].(string)
			n, err := strconv.ParseUint(tok, 10, 64)
			if err != nil {
				return out, fmt.Errorf("redisops: log entry %s of election %q has token %q", m.ID, name, tok)
			}
			out = append(out, LogEntry{ID: m.ID, Token: n, Value: val})
		}
	}
	return out, nil
}

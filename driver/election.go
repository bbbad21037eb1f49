package driver

import (
	"context"
	"time"
)

// Elector is implemented by a Driver that runs leader elections in its store: at
// most one leader per election name at a time, each term with a token larger than
// the terms before it. dlock.NewElection finds it by type assertion and runs a
// campaign under the same machinery as a mutex (validation, retries or the store's
// own wait, the validity deadline, renewal, Done/Err, Close): a term is a Lock.
//
// An election's store keys must never be those of a mutex (or of another election)
// of any name: each backend keeps elections in a namespace of their own.
type Elector interface {
	// TryCampaign makes one attempt to become name's leader with value for ttl. It
	// returns the term as a Lock whose Token (never 0) is larger than every earlier
	// term's of name, or Busy when another candidate leads (or, in a store that
	// queues candidates, waits ahead of this one). Refresh and Unlock of the Lock
	// extend and end the term (Unlock resigns).
	TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (Lock, error)
	// Leader returns name's current leader, or an error wrapping dlock.ErrNoLeader
	// when there is none.
	Leader(ctx context.Context, name string) (Leader, error)
	// WatchLeaders calls found with name's leaders in term order: first the current
	// leader if its token is above after, then each later leader as it is elected,
	// until ctx ends (it returns ctx.Err()) or the store fails (it returns the error;
	// dlock calls it again, after a pause, with the last token found). It never
	// calls found twice for one term, nor for a token at or below after. A store
	// that keeps no history may miss a term that began and ended between two looks;
	// its documentation says so.
	WatchLeaders(ctx context.Context, name string, after uint64, found func(Leader)) error
}

// Leader is one term of an election, as the store reports it.
type Leader struct {
	Value string // what the leader campaigned with
	Token uint64 // the term's fencing token
}

// CampaignWaiter is implemented by an Elector whose store queues candidates
// (ZooKeeper's sequential nodes, etcd's revisions): Campaign waits in that queue, as
// Waiter.Lock waits for a mutex, and dlock calls it for Campaign without WithRetry.
type CampaignWaiter interface {
	Campaign(ctx context.Context, name, value string, ttl time.Duration) (Lock, error)
}

// CampaignNotifier is implemented by an Elector whose Driver is a Notifier that
// announces the end of a term: CampaignWake returns the name to subscribe to for
// election name, so that a waiting candidate looks again at once.
type CampaignNotifier interface {
	CampaignWake(name string) string
}

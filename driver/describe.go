package driver

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// Inspection: what a store holds on a key — who holds it, since when, with which
// token, for how much longer, who waits — as dlock.Describe and dlock.List report
// it. A backend implements Describer on its Driver; the types below are what it
// returns (package dlock gives them to users under the same names).

// Describer is implemented by a Driver that can read what its store holds on a key.
// It only reads: it takes no lock, changes nothing, and leaves no trace.
type Describer interface {
	// Describe returns the state of each primitive the store holds on key — its
	// mutex, its semaphore, its read-write lock, the election of that name — that
	// has a holder or a waiter the store can show; none when nothing holds or
	// waits. key is validated.
	Describe(ctx context.Context, key string) ([]KeyState, error)
	// List returns the states, as Describe does, of every key the store holds or
	// queues for whose name begins with prefix ("" for all). A store that cannot
	// enumerate its locks returns an error wrapping errors.ErrUnsupported that
	// says why. prefix is valid UTF-8 of at most 255 bytes.
	List(ctx context.Context, prefix string) ([]KeyState, error)
}

// Kind says which primitive a KeyState describes.
type Kind string

// The kinds of KeyState.
const (
	KindLock      Kind = "lock"      // the mutex (Locker.Acquire)
	KindSemaphore Kind = "semaphore" // dlock.NewSemaphore
	KindRWLock    Kind = "rwlock"    // dlock.NewRWMutex
	KindElection  Kind = "election"  // dlock.NewElection
)

// KeyState is what the store holds for one primitive on one key.
type KeyState struct {
	Key  string // the key (for an election, its name)
	Kind Kind
	// Limit is a semaphore's limit as the store records it (0 where it records
	// none: a generic semaphore).
	Limit int
	// Holders are the live grants: one for a lock or an election (its leader),
	// up to Limit for a semaphore, the shared or the exclusive leases of a
	// read-write lock. Sorted by token where the store keeps one.
	Holders []Entry
	// Waiters are the claims queued behind the holders, in the store's order (a
	// semaphore's or read-write lock's next one first; an election's candidates).
	Waiters []Entry
	// Queue is true when the store keeps its waiters in a queue it shows (then
	// Waiters lists them all); false where waiters poll and the store knows
	// nothing of them (Redis without WithFIFO, Redlock, MySQL's and PostgreSQL's
	// tables without WithFIFO).
	Queue bool
	// Note, when not empty, says something about this state that the fields
	// above do not (e.g. "held on 3 of 5 masters").
	Note string
}

// Entry is one holder or waiter as the store sees it. A field the store does not
// keep is zero.
type Entry struct {
	// Owner is how the store names this claim: the random owner value a client
	// wrote (Redis, MySQL's table, mem), the session that owns a node (ZooKeeper),
	// the lease that carries a key (etcd), the connection that holds a named lock
	// (GET_LOCK), the server process of the session that holds an advisory lock
	// (PostgreSQL).
	Owner string
	// Token is the grant's fencing token (0 where the store keeps none for it).
	Token uint64
	// Shared is true for a shared lease of a read-write lock (false: exclusive, or
	// not a read-write lock).
	Shared bool
	// Value is an election candidate's value.
	Value string
	// Since is when the claim began: by the store's clock where it records it
	// (ZooKeeper's node creation time, mem), else by the holder's own clock from
	// its Holder record. For a waiter granted from a store's queue it is when it
	// joined the queue. Zero if unknown.
	Since time.Time
	// TTL is how long the store keeps the claim without a renewal, from the moment
	// it was read: a lease's time left, or for a waiter in a store that drops
	// silent waiters, how long its place lasts. 0 when unknown, or when the claim
	// lasts as long as a session (ZooKeeper, GET_LOCK, PostgreSQL's advisory
	// locks).
	TTL time.Duration
	// Address is the holder's network address as the store saw its connection
	// (GET_LOCK, PostgreSQL's advisory locks: the client's host:port), "" if the
	// store does not say.
	Address string
	// Holder is what the client recorded about itself when it took or queued the
	// claim (dlock.WithHolder), nil if it recorded nothing or the store cannot keep
	// it.
	Holder *Holder
}

// Holder is what a client records about itself with a claim it makes, where the
// store can keep it (dlock.WithHolder): its host, its process id, a name. It is
// written in the request that takes or queues the lock, never in one of its own.
type Holder struct {
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	Name string `json:"name,omitempty"`
	// Since is when the request that carried the record was sent, by the client's
	// clock; the core sets it.
	Since time.Time `json:"since,omitzero"`
}

// IsZero reports whether h records nothing (Since aside).
func (h Holder) IsZero() bool { return h.Host == "" && h.PID == 0 && h.Name == "" }

// holderKey is the context key of the holder record.
type holderKey struct{}

// WithHolder returns a context carrying h, for the driver calls of one acquire:
// dlock's core calls it when the caller gave dlock.WithHolder. A driver reads it
// with HolderFrom.
func WithHolder(ctx context.Context, h Holder) context.Context {
	return context.WithValue(ctx, holderKey{}, h)
}

// HolderFrom returns the holder record ctx carries, if any: what a driver writes
// with the claim it makes (AppendHolder, or a place of the store's own).
func HolderFrom(ctx context.Context) (Holder, bool) {
	h, ok := ctx.Value(holderKey{}).(Holder)
	return h, ok && !h.IsZero()
}

// holderSep separates a value from the holder record appended to it.
const holderSep = "\n"

// AppendHolder returns value with the holder record ctx carries appended
// (value + "\n" + its JSON), or value unchanged when ctx carries none: what a
// driver stores where the store keeps one value per claim (a Redis owner value, an
// etcd key's value, a ZooKeeper node's data). CutHolder takes it apart.
func AppendHolder(ctx context.Context, value string) string {
	h, ok := HolderFrom(ctx)
	if !ok {
		return value
	}
	b, err := json.Marshal(h)
	if err != nil {
		return value
	}
	return value + holderSep + string(b)
}

// CutHolder splits a value written by AppendHolder into the value before the
// record and the record; h is nil when v carries none (a value written without
// one, or by another client).
func CutHolder(v string) (value string, h *Holder) {
	i := strings.LastIndex(v, holderSep+"{")
	if i < 0 {
		return v, nil
	}
	var rec Holder
	if err := json.Unmarshal([]byte(v[i+len(holderSep):]), &rec); err != nil {
		return v, nil
	}
	return v[:i], &rec
}

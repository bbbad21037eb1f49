// Package fence is the resource's side of fencing tokens: guards that make a
// protected resource refuse the write of a lock holder whose lease has been
// superseded — the holder that checked its lease, paused (a GC, a SIGSTOP, a VM
// migration), and writes after another client was granted the lock.
//
// Every guard enforces the rule of docs/fencing.md, per resource:
//
//   - refuse token 0 (a lock that cannot fence hands out 0 to every holder);
//   - refuse a token below the highest token accepted so far;
//   - refuse a token equal to the highest accepted when it comes from another
//     writer (another grant: a store that lost writes, e.g. across an
//     asynchronous failover, can hand one token out twice);
//   - accept anything else, and remember a larger token with its writer.
//
// The writer is any value unique to one grant (NewWriter makes one); a holder
// passes its lease's Token and its writer with every write of that grant.
//
// Every guard implements Guard (Check), and has a guarded write of its own in which
// the check and the write are one atomic step of its store, so that no newer grant
// can be accepted between them:
//
//	guard             package           guarded write                         fence kept in
//	Memory            fence             Do (a function run under the fence)   this process
//	Dir               fence             WriteFile (a file replaced)           files in a directory, one host
//	sqlfence.Guard    fence/sqlfence    Tx (the caller's transaction)         a table (MySQL/MariaDB, PostgreSQL)
//	redisfence.Guard  fence/redisfence  Set, HSet, Del (one Lua script)       a hash per resource
//	etcdfence.Guard   fence/etcdfence   Txn (one etcd transaction)            a key per resource
//
// Handler puts any Guard in front of an HTTP service (409 Conflict for a stale
// token); Transport and SetHeader send a grant's token and writer with requests.
//
// A guard protects only the writes that go through it, and keeps its promise only as
// long as its store keeps the fences it accepted: a store that loses acknowledged
// writes (a Redis failover to a lagging replica, a restart without persistence)
// forgets fences, and then accepts a stale writer's token again. Each guard's
// documentation says what its store guarantees.
package fence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Guard decides writes to named resources by the fencing rule (see the package
// documentation). Implementations are safe for concurrent use.
type Guard interface {
	// Check accepts a write of token by writer to resource — remembering token and
	// writer as the resource's fence when token is the largest yet — or refuses it
	// with an error wrapping ErrStale (a *StaleError saying why). An empty or
	// over-long resource or writer is ErrInvalid; a failure of the guard's store is
	// returned as it came, and then nothing is known about the write: treat it as
	// refused.
	//
	// Check alone does not make a later write of yours safe: between Check and that
	// write a newer holder may pass Check and write, and your write then lands after
	// its. Make the write with the guard's guarded-write form, which checks and
	// writes in one step, or make Check the write itself.
	Check(ctx context.Context, resource string, token uint64, writer string) error
}

// Sentinel errors. Errors from this package and its guards wrap one of them, or a
// store's own error.
var (
	// ErrStale: the write was refused by the fencing rule (token 0, a token below the
	// resource's fence, or an equal token from another writer). The error is a
	// *StaleError.
	ErrStale = errors.New("fence: stale token")
	// ErrInvalid: a resource or writer that no guard accepts (empty, longer than
	// MaxLen bytes, or not UTF-8), or a token or state a store cannot hold.
	ErrInvalid = errors.New("fence: invalid argument")
)

// MaxLen is the longest resource name and writer, in bytes: the longest dlock key,
// so that a lock's key can name its resource.
const MaxLen = 255

// Reason says why a write was refused.
type Reason string

// The reasons of a refusal.
const (
	// ZeroToken: token 0, which a lock without fencing gives every holder.
	ZeroToken Reason = "zero-token"
	// BelowFence: a token below the highest one the resource has accepted: a newer
	// grant has written.
	BelowFence Reason = "below-fence"
	// OtherWriter: a token equal to the highest accepted, from another writer: the
	// token was handed out twice (a store that lost writes).
	OtherWriter Reason = "other-writer"
	// ConditionFailed: the token passed the rule, but a condition the caller added to
	// the guarded write did not hold (etcdfence's TxnIf, e.g. with etcdlock's Fence:
	// the lock is no longer held).
	ConditionFailed Reason = "condition-failed"
)

// StaleError is a refused write. It never holds a writer: a writer identifies a
// grant, and an error may travel further than the grant should.
type StaleError struct {
	Resource string
	Token    uint64 // the token refused
	Reason   Reason
	// Fence is the highest token the resource had accepted when it refused (0 when
	// it had accepted none, or for ZeroToken).
	Fence uint64
}

// Error says which resource refused which token, and why (never the writer).
func (e *StaleError) Error() string {
	switch e.Reason {
	case ZeroToken:
		return fmt.Sprintf("fence: %q refused token 0 (a lock without fencing tokens)", e.Resource)
	case BelowFence:
		return fmt.Sprintf("fence: %q refused token %d: it has accepted token %d (a newer grant wrote)", e.Resource, e.Token, e.Fence)
	case OtherWriter:
		return fmt.Sprintf("fence: %q refused token %d from another writer than the one it accepted it from (the token was handed out twice)", e.Resource, e.Token)
	case ConditionFailed:
		return fmt.Sprintf("fence: %q refused token %d: a condition of the write did not hold", e.Resource, e.Token)
	}
	return fmt.Sprintf("fence: %q refused token %d (%s)", e.Resource, e.Token, e.Reason)
}

// Is makes errors.Is(err, ErrStale) true for a *StaleError.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// State is what a guard keeps per resource: the highest token it has accepted (its
// fence) and the writer that presented it. The zero State is a resource for which
// nothing was accepted.
type State struct {
	Token  uint64
	Writer string
}

// Admit applies the fencing rule to a write of token by writer to resource, in
// state s. It returns the state after the write and nil when the write may land,
// or s and a *StaleError (ErrStale) when it must not; or ErrInvalid (Validate). It
// is the whole rule: a guard of your own keeps a State per resource and replaces
// it with Admit's, atomically with the write.
func (s State) Admit(resource string, token uint64, writer string) (State, error) {
	if err := Validate(resource, token, writer); err != nil {
		return s, err
	}
	switch {
	case token > s.Token:
		return State{Token: token, Writer: writer}, nil
	case token < s.Token:
		return s, &StaleError{Resource: resource, Token: token, Reason: BelowFence, Fence: s.Token}
	case writer != s.Writer:
		return s, &StaleError{Resource: resource, Token: token, Reason: OtherWriter, Fence: s.Token}
	}
	return s, nil
}

// Validate makes the checks every guard makes before it asks its store: an empty
// resource or writer, one longer than MaxLen bytes or not valid UTF-8, is
// ErrInvalid (the error names the resource, never the writer); token 0 is a
// *StaleError (ZeroToken).
func Validate(resource string, token uint64, writer string) error {
	switch {
	case resource == "" || len(resource) > MaxLen || !utf8.ValidString(resource):
		return fmt.Errorf("%w: resource %q: want 1 to %d bytes of UTF-8", ErrInvalid, resource, MaxLen)
	case writer == "" || len(writer) > MaxLen || !utf8.ValidString(writer):
		return fmt.Errorf("%w: the writer of %q: want 1 to %d bytes of UTF-8", ErrInvalid, resource, MaxLen)
	case token == 0:
		return &StaleError{Resource: resource, Reason: ZeroToken}
	}
	return nil
}

// NewWriter returns a new writer: 128 random bits in hex, unique to one grant with
// overwhelming probability. Make one per lease (not per process: two grants of one
// process are two writers).
func NewWriter() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

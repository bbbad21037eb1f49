// Package etcdfence is a fencing guard (package fence) for etcd: the fence of a
// resource is an etcd key, and the guarded write is one etcd transaction that
// checks the rule and makes the caller's operations, so that etcd decides both at
// one revision.
//
// The fence of resource is the key prefix + "/" + resource, whose value is the
// token in 20 zero-padded decimal digits, a space, and the writer: byte order is
// then token order, and etcd compares values byte by byte. One transaction, of
// nested transactions, takes the first branch that holds:
//
//	the fence key does not exist              → put the fence, run the operations
//	its value < the padded token              → put the fence, run the operations
//	its value = the padded token + " " + writer → run the operations
//	else                                      → read the fence (the refusal's reason)
//
// etcdlock's own Locker.Fence is a stricter guard for writes into the same etcd: a
// comparison that the lock key of a lease still exists. It needs no fence key, but
// works only for etcdlock's leases, granted through the same Locker. TxnIf adds
// such comparisons to the rule's branches: a write that passes the rule but whose
// lock is gone is refused too (fence.ConditionFailed).
//
// Not guaranteed: etcd commits through Raft, so an acknowledged fence survives the
// loss of a minority of members and restarts; losing a majority's data (restoring
// an old snapshot) forgets fences. Writes that do not go through the guard's
// transaction are not guarded. Operations must not write the fence key itself
// (etcd refuses a transaction that puts one key twice).
package etcdfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
)

// DefaultPrefix is where the fences live unless WithPrefix says otherwise.
const DefaultPrefix = "/dlock-fence"

// Guard is a fence.Guard whose fences are etcd keys. Safe for concurrent use.
type Guard struct {
	cli    *clientv3.Client
	prefix string
}

// Option configures New.
type Option func(*Guard)

// WithPrefix puts the fences under prefix instead of DefaultPrefix (a trailing
// slash is ignored; an empty prefix is DefaultPrefix).
func WithPrefix(prefix string) Option { return func(g *Guard) { g.prefix = prefix } }

// New returns the guard of the fences in the etcd cluster cli talks to. The caller
// keeps cli.
func New(cli *clientv3.Client, opts ...Option) *Guard {
	g := &Guard{cli: cli, prefix: DefaultPrefix}
	for _, o := range opts {
		o(g)
	}
	g.prefix = strings.TrimRight(g.prefix, "/")
	if g.prefix == "" {
		g.prefix = DefaultPrefix
	}
	return g
}

// Key returns the etcd key of resource's fence.
func (g *Guard) Key(resource string) string { return g.prefix + "/" + resource }

// Check applies the rule (see fence.Guard) in a transaction of its own; the fence
// moves for a larger token, and nothing else is written.
func (g *Guard) Check(ctx context.Context, resource string, token uint64, writer string) error {
	_, err := g.TxnIf(ctx, resource, token, writer, nil)
	return err
}

// Txn is the guarded write: one etcd transaction that runs ops only if the rule
// accepts token and writer for resource (and moves the fence for a larger token).
// It returns ops' responses, in order, or the refusal (fence.ErrStale), or etcd's
// error (then nothing is known: the transaction may have been applied). A branch
// holds ops and the fence's put: at most 127 operations under etcd's default
// --max-txn-ops of 128.
func (g *Guard) Txn(ctx context.Context, resource string, token uint64, writer string, ops ...clientv3.Op) ([]*pb.ResponseOp, error) {
	return g.TxnIf(ctx, resource, token, writer, nil, ops...)
}

// TxnIf is Txn with comparisons of the caller's that must hold as well — e.g.
// etcdlock's Locker.Fence, that the lease's lock key still exists. A write that
// passes the rule but not cmps is refused with a *fence.StaleError whose Reason is
// fence.ConditionFailed (errors.Is fence.ErrStale).
func (g *Guard) TxnIf(ctx context.Context, resource string, token uint64, writer string, cmps []clientv3.Cmp, ops ...clientv3.Op) ([]*pb.ResponseOp, error) {
	if err := fence.Validate(resource, token, writer); err != nil {
		return nil, err
	}
	key, padded := g.Key(resource), fmt.Sprintf("%020d", token)
	value := padded + " " + writer
	when := func(c clientv3.Cmp) []clientv3.Cmp { return append([]clientv3.Cmp{c}, cmps...) }
	accept := append([]clientv3.Op{clientv3.OpPut(key, value)}, ops...)
	resp, err := g.cli.Txn(ctx).
		If(when(clientv3.Compare(clientv3.CreateRevision(key), "=", 0))...).
		Then(accept...).
		Else(clientv3.OpTxn(when(clientv3.Compare(clientv3.Value(key), "<", padded)), accept,
			[]clientv3.Op{clientv3.OpTxn(when(clientv3.Compare(clientv3.Value(key), "=", value)), ops,
				[]clientv3.Op{clientv3.OpGet(key)})})).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdfence: %q: %w", resource, err)
	}
	if resp.Succeeded {
		return resp.Responses[1:], nil
	}
	lower := resp.Responses[0].GetResponseTxn()
	if lower.Succeeded {
		return lower.Responses[1:], nil
	}
	same := lower.Responses[0].GetResponseTxn()
	if same.Succeeded {
		return same.Responses, nil
	}
	// Refused: the fence, read in the same transaction, says why.
	var cur fence.State
	if kvs := same.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if cur, err = parse(string(kvs[0].Value)); err != nil {
			return nil, fmt.Errorf("%w: the fence of %q (%s): %v", fence.ErrInvalid, resource, key, err)
		}
	}
	if _, err := cur.Admit(resource, token, writer); err != nil {
		return nil, err
	}
	return nil, &fence.StaleError{Resource: resource, Token: token, Reason: fence.ConditionFailed, Fence: cur.Token}
}

// parse reads a fence value: the padded token, a space, the writer.
func parse(v string) (fence.State, error) {
	tok, writer, ok := strings.Cut(v, " ")
	t, err := strconv.ParseUint(tok, 10, 64)
	if !ok || len(tok) != 20 || err != nil || t == 0 || writer == "" {
		return fence.State{}, errors.New("not a token and a writer")
	}
	return fence.State{Token: t, Writer: writer}, nil
}

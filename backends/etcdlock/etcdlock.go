// Package etcdlock is the etcd backend of dlock: a lock is a key attached to an
// etcd lease, and waiters queue by the keys' create revisions.
//
// Layout: the lock named key is the set of keys under <prefix>/<escaped key>/, one per
// contender, each named by its lease ID in hex; the contender whose key has the
// lowest create revision holds the lock. This is the layout of etcd's own
// concurrency.Mutex and of `etcdctl lock`, so a dlock Locker, a concurrency.Mutex on
// the name <prefix>/<escaped key> and `etcdctl lock <prefix>/<escaped key>` exclude
// each other. The key is escaped with url.PathEscape (a key made of letters, digits,
// '-', '_', '.' and '~' is unchanged), so that no key's queue lies inside another's.
// A contender's key is empty, or holds the record of a lock taken with
// dlock.WithHolder (which dlock.Describe shows; describe.go).
//
// Each grant has its own etcd lease whose TTL is the whole number of seconds above
// the requested TTL, plus one: the lease lives only as long as the lease holder
// refreshes it (Refresh, WithAutoRenew), so a holder that vanishes or hangs loses the
// lock between TTL and ⌈TTL⌉+1s later (plus the server's expiry scan, 500ms). Leases
// are kept in a per-Locker pool between grants, so an acquire costs one transaction
// and a release one more, as with concurrency.Mutex. The token is the create revision
// of the holder's key, which increases with every grant of the name.
//
// The scheme "etcd://host1:2379,host2:2379/prefix" opens a Locker on a new client
// (default prefix /dlock).
package etcdlock

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// DefaultPrefix is the etcd key prefix of the locks when New is given no WithPrefix.
const DefaultPrefix = "/dlock"

// MinTTL is the shortest TTL a Locker accepts. etcd leases count whole seconds (and
// the server has a minimum, 2s by default), so the server keeps a lock up to ⌈TTL⌉+1s
// after its last renewal; the local validity follows the TTL asked for.
const MinTTL = time.Second

// Option configures New.
type Option func(*config)

type config struct {
	prefix    string
	ownClient bool
}

// WithPrefix puts the locks under prefix instead of DefaultPrefix. A trailing slash is
// ignored; an empty prefix is DefaultPrefix. A segment of the prefix may not be one
// of the namespaces a Locker keeps under its prefix ("!primitives", ";election"): a
// Locker there would share queues with another's semaphores, read-write locks or
// elections, so New panics (a programming error; an etcd:// URL is refused with
// dlock.ErrInvalidURL). A prefix inside another Locker's (/p/a and /p) is fine:
// each Locker counts only the keys directly in a queue (<queue>/<lease ID>), so the
// keys of /p/a that lie in the range of /p's key "a" block nothing.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// withOwnClient makes Close close the client too (Lockers opened by URL).
func withOwnClient() Option { return func(c *config) { c.ownClient = true } }

// Locker is a dlock.Locker on etcd. Besides the dlock.Locker methods it gives the
// comparison that fences writes into etcd itself (Fence).
type Locker struct {
	dlock.Locker
	d *etcdDriver
}

// New returns a Locker whose locks live in the etcd cluster cli talks to. The caller
// keeps cli: Close does not close it. Leases end with dlock.ErrLost when their lock
// key disappears (revoked lease, key deleted by hand).
//
// Unlike the other backends' New, it returns the concrete *Locker rather than a
// dlock.Locker: its Fence method (a comparison that fences writes into etcd itself)
// needs the driver behind the leases, which the dlock.Locker interface does not
// reach. *Locker is a dlock.Locker; assign it to one where Fence is not used.
func New(cli *clientv3.Client, opts ...Option) *Locker {
	c := config{prefix: DefaultPrefix}
	for _, o := range opts {
		o(&c)
	}
	c.prefix = strings.TrimRight(c.prefix, "/")
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if err := validatePrefix(c.prefix); err != nil {
		panic("etcdlock: " + err.Error())
	}
	d := newDriver(cli, c.prefix, c.ownClient)
	return &Locker{Locker: dlock.New(d, driver.Info{Name: "etcd", MinTTL: MinTTL}), d: d}
}

// Unwrap returns the dlock.Locker underneath (dlock.Unwrapper).
func (l *Locker) Unwrap() dlock.Locker { return l.Locker }

// Fence returns the comparison that is true only while ls still holds its lock: its
// lock key exists with ls.Token() as its create revision. Put it in the If of an
// etcd transaction to make a write that a holder who lost the lock (expired, paused,
// partitioned) cannot make:
//
//	cmp, err := locker.Fence(ls)
//	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, v)).Commit()
//	// resp.Succeeded is false if the lock was no longer ours when etcd applied it.
//
// It returns dlock.ErrNotHeld (and no comparison) for a lease this Locker did not
// grant, has released, or has seen lost (its key gone): such a writer is refused
// here. It does not consult the server, nor the lease's local validity: a stale
// holder whose loss this Locker has not seen yet gets a comparison, and etcd rejects
// its transaction.
func (l *Locker) Fence(ls dlock.Lease) (clientv3.Cmp, error) {
	name, ok := l.d.heldKey(ls.Key(), ls.Token())
	if !ok {
		return clientv3.Cmp{}, fmt.Errorf("%w: %q (token %d) is not a lease held through this etcd Locker", dlock.ErrNotHeld, ls.Key(), ls.Token())
	}
	return clientv3.Compare(clientv3.CreateRevision(name), "=", int64(ls.Token())), nil
}

// QueueName is the name concurrency.Mutex and `etcdctl lock` use for the lock named
// key under prefix: concurrency.NewMutex(session, QueueName(prefix, key)) excludes
// dlock's holders of key.
func QueueName(prefix, key string) string {
	return strings.TrimRight(prefix, "/") + "/" + url.PathEscape(key)
}

// validatePrefix refuses a prefix that has a segment naming a namespace a Locker
// keeps under its own prefix (see WithPrefix).
func validatePrefix(prefix string) error {
	for _, seg := range strings.Split(prefix, "/") {
		if seg == primitivesDir || seg == electionsDir {
			return fmt.Errorf("prefix %q has the segment %q, where a Locker on a shorter prefix keeps its primitives or elections", prefix, seg)
		}
	}
	return nil
}

var errLeaseLost = errors.New("the etcd lease of the queued key ended while waiting")

// Package zklock is the ZooKeeper backend: the lock recipe of ephemeral sequential
// nodes, with waiters queued by the ensemble.
//
// Each key has a lock directory under a root (default /dlock): root + "/" +
// EscapeKey(key), a container node that ZooKeeper removes once it is empty. To take
// the lock a client creates an ephemeral sequential node "_c_<guid>-lock-NNNNNNNNNN"
// in it; the node with the lowest sequence number holds the lock, and every other
// waiter watches only the node just before its own (no herd effect: a release
// wakes one waiter). The node belongs to the client's session, so a client that
// crashes loses its locks when the ensemble expires its session. These are the
// names and the rule of go-zookeeper's zk.Lock and Apache Curator's
// InterProcessMutex, so all three exclude each other on the same directory. A
// lock node's data is empty, or the record of a lock taken with dlock.WithHolder
// (which dlock.Describe shows; describe.go).
// Children that are not lock nodes of this protocol are ignored: other names, and
// nodes named like one that no session owns (a persistent node planted there would
// otherwise block the key for ever). Telling the latter apart costs nothing on the
// way to a grant — a waiter reads the stat of the node it watches anyway — and one
// round trip for a TryAcquire that finds the key held.
//
// Leases last as long as the session (driver.Info.SessionTTL): TTL options are
// ignored and Refresh returns errors.ErrUnsupported. Done closes with dlock.ErrLost
// when the session expires, when the lock node is deleted behind the holder's back,
// when the connection is closed, and — because a client cut off from the ensemble
// cannot learn that its session expired — when the client has been disconnected for
// as long as the ensemble could have taken to expire the session (see Locker docs in
// docs/backends/zookeeper.md). Its Err says which (dlock.LossError: CauseSession,
// CauseDeleted, or CauseUnreachable for the disconnection), and while the client is
// disconnected dlock.Deadline reports when the lease will end. The fencing token is the lock node's creation zxid,
// which grows with every grant on a key, also when its directory is recreated.
package zklock

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

const (
	// DefaultRoot is the node under which lock directories live unless WithRoot
	// (or the URL's path) says otherwise.
	DefaultRoot = "/dlock"

	protectedPrefix = "_c_"   // go-zookeeper's and Curator's prefix for nodes found again by GUID
	lockInfix       = "lock-" // zk.Lock and Curator: "...lock-" + 10-digit sequence
)

// Option configures New.
type Option func(*config)

type config struct {
	root       string
	acl        []zk.ACL
	timeout    time.Duration // session timeout the connection negotiated; 0 = unknown
	closeConn  bool          // the Locker owns the connection (Open)
	negotiated func() time.Duration
}

// WithRoot puts lock directories under root instead of DefaultRoot. root must be
// an absolute ZooKeeper path other than "/", outside /zookeeper and without a
// ".elections" segment (where a Locker on a shorter root keeps its elections: a
// Locker there would put its lock directories among another's election
// directories); New panics otherwise (a programming error). The root is created
// when missing.
func WithRoot(root string) Option { return func(c *config) { c.root = root } }

// WithACL sets the ACL of the nodes the Locker creates: its lock nodes, the lock
// directories and the root (default zk.WorldACL(zk.PermAll): any client may delete
// a holder's node). On a connection authenticated with conn.AddAuth("digest", …),
// zk.AuthACL(zk.PermAll) gives them to that identity alone, as a zk:// URL with
// user:password does: ZooKeeper checks a delete against the parent's ACL, so a
// creator-only lock directory keeps other clients from deleting lock nodes in it or
// planting children. A root or directory that already exists keeps its own ACL.
func WithACL(acl []zk.ACL) Option { return func(c *config) { c.acl = acl } }

// WithSessionTimeout tells the Locker the session timeout its connection negotiated
// with the ensemble. A holder cut off from the ensemble ends its leases with ErrLost
// once it has been disconnected for a third of it, minus a drift allowance (the
// earliest moment the ensemble may have expired the session, given that
// go-zookeeper notices a silent link after two thirds of it). Without this option
// the timeout is unknown and a lease ends at the first disconnection seen. Give
// the negotiated value: a server clamps the requested timeout to its
// [minSessionTimeout, maxSessionTimeout]; a value larger than the real one lets a
// lease outlive its session. Open learns the negotiated value by itself.
func WithSessionTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// New returns a Locker that takes locks through conn, which must stay open while the
// Locker is used; Close does not close it. See the package documentation for the
// algorithm. New panics on an invalid WithRoot.
func New(conn *zk.Conn, opts ...Option) dlock.Locker {
	c := config{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll)}
	for _, o := range opts {
		o(&c)
	}
	if err := validateRoot(c.root); err != nil {
		panic("zklock: " + err.Error())
	}
	return newLocker(conn, c)
}

func newLocker(conn *zk.Conn, c config) dlock.Locker {
	d := &zkDriver{conn: conn, cfg: c, held: map[*zkLock]struct{}{}, done: make(chan struct{})}
	return dlock.New(d, driver.Info{Name: "zookeeper", SessionTTL: true})
}

// validateRoot checks root as ZooKeeper's PathUtils would, plus what dlock needs.
func validateRoot(root string) error {
	if root == "" || root[0] != '/' || root == "/" || strings.HasSuffix(root, "/") {
		return fmt.Errorf("root %q must be an absolute path other than \"/\", without a trailing slash", root)
	}
	for i, seg := range strings.Split(root[1:], "/") {
		switch {
		case seg == "", seg == ".", seg == "..":
			return fmt.Errorf("root %q has an empty, \".\" or \"..\" segment", root)
		case i == 0 && seg == "zookeeper":
			return fmt.Errorf("root %q is inside ZooKeeper's own /zookeeper", root)
		case seg == electionsDir:
			return fmt.Errorf("root %q has the segment %q, where a Locker on a shorter root keeps its elections", root, seg)
		}
		for _, r := range seg {
			if r < 0x20 || 0x7f <= r && r <= 0x9f || 0xd800 <= r && r <= 0xf8ff || r >= 0xfff0 {
				return fmt.Errorf("root %q contains the character %U, which ZooKeeper rejects", root, r)
			}
		}
	}
	return nil
}

// LockDir returns the path of key's lock directory under root: the directory to give
// go-zookeeper's zk.NewLock or Curator's InterProcessMutex so that they and dlock
// exclude each other on key.
func LockDir(root, key string) string { return root + "/" + EscapeKey(key) }

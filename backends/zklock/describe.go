package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// Inspection (dlock.Describe, dlock.List). A key's lock directory D is listed once
// for its mutex's and its read-write lock's nodes, D/leases and D/locks for its
// semaphore, and the election's directory for its candidates; then each node of the
// protocols is read (its data and stat): one round trip per node, not one snapshot.
// What the store keeps: every contender's node in sequence order (the holder first,
// then the waiters: Queue is true), the session that owns it (the Owner), its
// creation zxid (the token, shown for the holders), its creation time by the
// server's clock (Since); no time left: a node lasts as long as its session. A
// mutex's, read-write lock's or semaphore's node holds the Holder record its client
// wrote with dlock.WithHolder (driver.AppendHolder on empty data; the recipes read
// only the names of those nodes, and Curator's own nodes hold its client's address,
// which is no record); an election candidate's node holds its value. A node named
// like a lock node that no session owns was planted: the recipes ignore it, and so
// does Describe (its Note counts them). List lists the root and its election
// directory and decodes the escaped names.

var _ driver.Describer = (*zkDriver)(nil)

// holderData is the data of a node the client creates for a claim: the Holder
// record ctx carries, or none.
func holderData(ctx context.Context) []byte {
	if v := driver.AppendHolder(ctx, ""); v != "" {
		return []byte(v)
	}
	return nil
}

// zkNode is one node of a protocol, read.
type zkNode struct {
	name string
	seq  int64
	data []byte
	st   *zk.Stat
}

// entry is the node as Describe shows it; holds says whether it holds (then its
// token is shown).
func (n zkNode) entry(holds, record bool) driver.Entry {
	e := driver.Entry{Owner: fmt.Sprintf("session %x", n.st.EphemeralOwner), Since: time.UnixMilli(n.st.Ctime)}
	if holds {
		e.Token = uint64(n.st.Czxid)
	}
	if record {
		_, e.Holder = driver.CutHolder(string(n.data))
	}
	return e
}

// list returns the children of dir (none if it does not exist).
func (d *zkDriver) list(ctx context.Context, dir string) ([]string, error) {
	c, err := call(ctx, func() ([]string, error) { return d.children(dir) }, nil)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return c, nil
}

// read reads the children of dir that seqOf names as nodes of a protocol and
// returns those a session owns, by sequence, and how many no session owns
// (planted).
func (d *zkDriver) read(ctx context.Context, dir string, children []string, seqOf func(string) (int64, bool)) ([]zkNode, int, error) {
	var out []zkNode
	planted := 0
	for _, c := range children {
		seq, ok := seqOf(c)
		if !ok {
			continue
		}
		n, err := call(ctx, func() (zkNode, error) {
			data, st, err := d.conn.Get(dir + "/" + c)
			return zkNode{name: c, seq: seq, data: data, st: st}, err
		}, nil)
		switch {
		case errors.Is(err, zk.ErrNoNode): // gone meanwhile
			continue
		case err != nil:
			return nil, 0, fmt.Errorf("read %s/%s: %w", dir, c, err)
		case n.st.EphemeralOwner == 0:
			planted++
			continue
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b zkNode) int { return cmp.Compare(a.seq, b.seq) })
	return out, planted, nil
}

// plantedNote is a state's Note for planted nodes ignored.
func plantedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d node(s) named like lock nodes that no session owns (planted) ignored", n)
}

// leaseSeq returns the sequence of a semaphore's lease node: dlock's
// "…-limit<N>-lease-<seq>" or Curator's "…lease-<seq>".
func leaseSeq(name string) (int64, bool) {
	if len(name) < len(leaseInfix)+seqDigits {
		return 0, false
	}
	digits := name[len(name)-seqDigits:]
	if !strings.HasSuffix(name[:len(name)-seqDigits], leaseInfix) || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

func rwSeqOnly(name string) (int64, bool) {
	seq, _, ok := rwSeq(name)
	return seq, ok
}

func latchSeq(name string) (int64, bool) { return parseSeqOf(name, latchInfix) }

func (d *zkDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	dir := LockDir(d.cfg.root, key)
	var out []driver.KeyState
	children, err := d.list(ctx, dir)
	if err != nil {
		return nil, err
	}

	// The mutex.
	nodes, planted, err := d.read(ctx, dir, children, parseSeq)
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		s := driver.KeyState{Key: key, Kind: driver.KindLock, Queue: true, Note: plantedNote(planted)}
		for i, n := range nodes {
			add(&s, n.entry(i == 0, true), i == 0)
		}
		out = append(out, s)
	}

	// The read-write lock.
	nodes, planted, err = d.read(ctx, dir, children, rwSeqOnly)
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		s := driver.KeyState{Key: key, Kind: driver.KindRWLock, Queue: true, Note: plantedNote(planted)}
		writer := false // a write node came before
		for i, n := range nodes {
			_, w, _ := rwSeq(n.name)
			holds := !writer && (!w || i == 0)
			writer = writer || w
			e := n.entry(holds, true)
			e.Shared = !w
			add(&s, e, holds)
		}
		out = append(out, s)
	}

	// The semaphore: its lease nodes, then those queued on D/locks.
	if slices.Contains(children, leasesDir) || slices.Contains(children, locksDir) {
		var leases, line []zkNode
		var p1, p2 int
		c, err := d.list(ctx, dir+"/"+leasesDir)
		if err == nil {
			leases, p1, err = d.read(ctx, dir+"/"+leasesDir, c, leaseSeq)
		}
		if err == nil {
			c, err = d.list(ctx, dir+"/"+locksDir)
		}
		if err == nil {
			line, p2, err = d.read(ctx, dir+"/"+locksDir, c, parseSeq)
		}
		if err != nil {
			return nil, err
		}
		if len(leases)+len(line) > 0 {
			s := driver.KeyState{Key: key, Kind: driver.KindSemaphore, Queue: true, Note: plantedNote(p1 + p2)}
			for _, n := range leases {
				if l, ok := leaseNode(n.name); ok && l > 0 { // Curator's nodes record no limit
					s.Limit = l
					break
				}
			}
			for i, n := range leases {
				holds := s.Limit == 0 || i < s.Limit // Curator's nodes record no limit
				add(&s, n.entry(holds, true), holds)
			}
			// The first in line on D/locks has made its lease node and waits for the
			// count: it is shown once, as that node.
			if len(line) > 0 && s.Limit > 0 && slices.ContainsFunc(leases[min(s.Limit, len(leases)):], func(n zkNode) bool {
				return n.st.EphemeralOwner == line[0].st.EphemeralOwner
			}) {
				line = line[1:]
			}
			for _, n := range line {
				add(&s, n.entry(false, true), false)
			}
			out = append(out, s)
		}
	}

	// The election.
	edir := ElectionPath(d.cfg.root, key)
	c, err := d.list(ctx, edir)
	if err != nil {
		return nil, err
	}
	nodes, planted, err = d.read(ctx, edir, c, latchSeq)
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		s := driver.KeyState{Key: key, Kind: driver.KindElection, Queue: true, Note: plantedNote(planted)}
		for i, n := range nodes {
			e := n.entry(i == 0, false)
			e.Value = string(n.data)
			add(&s, e, i == 0)
		}
		out = append(out, s)
	}
	return out, nil
}

// add puts e among s's holders or its waiters.
func add(s *driver.KeyState, e driver.Entry, holds bool) {
	if holds {
		s.Holders = append(s.Holders, e)
	} else {
		s.Waiters = append(s.Waiters, e)
	}
}

// List lists the root (the lock directories) and the election directory, decodes
// the names, and describes each that begins with prefix.
func (d *zkDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	root, err := d.list(ctx, d.cfg.root)
	if err != nil {
		return nil, err
	}
	elections, err := d.list(ctx, d.cfg.root+"/.elections")
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, seg := range slices.Concat(root, elections) {
		if name, ok := unescapeKey(seg); ok && strings.HasPrefix(name, prefix) {
			names[name] = true
		}
	}
	return generic.DescribeAll(ctx, names, d.Describe)
}

package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Leader election (dlock.NewElection) in the node layout of Apache Curator's
// LeaderLatch: each candidate creates an ephemeral sequential node
// "_c_<guid>-latch-NNNNNNNNNN" in the election's directory (ElectionPath), holding
// the leader's value as its data; the lowest sequence number leads, each other
// candidate watches the node just before its own, and the node's creation zxid is
// the term's token. A LeaderLatch on ElectionPath(root, name) with the value as its
// participant id therefore campaigns in the same election. Observers list the
// directory at each change: a term that begins and ends between two lists is not
// seen (ZooKeeper keeps no history of deleted nodes).

const latchInfix = "latch-" // Curator's LeaderLatch: "...latch-" + 10-digit sequence

// latchRule: the lowest candidate node leads; each other candidate watches the one
// just before its own.
var latchRule = lowestRule(latchInfix)

var (
	_ driver.Elector        = (*zkDriver)(nil)
	_ driver.CampaignWaiter = (*zkDriver)(nil)
)

// ElectionPath returns the directory of election name under root: the latch path a
// Curator LeaderLatch takes to campaign in it. Its ".elections" segment is never a
// lock directory (EscapeKey escapes '.').
func ElectionPath(root, name string) string { return root + "/" + electionsDir + "/" + EscapeKey(name) }

// electionsDir is the directory under the root that holds every election's.
const electionsDir = ".elections"

func (d *zkDriver) TryCampaign(ctx context.Context, name, value string, _ time.Duration) (driver.Lock, error) {
	return d.campaign(ctx, name, value, false)
}

// Campaign queues for the election and waits until its node is the lowest.
func (d *zkDriver) Campaign(ctx context.Context, name, value string, _ time.Duration) (driver.Lock, error) {
	return d.campaign(ctx, name, value, true)
}

func (d *zkDriver) campaign(ctx context.Context, name, value string, wait bool) (driver.Lock, error) {
	return asLock(d.acquire(ctx, ElectionPath(d.cfg.root, name), latchInfix, []byte(value), wait, latchRule, nil))
}

// candidates returns the candidate nodes among children, lowest sequence first.
func candidates(children []string) []string {
	type node struct {
		name string
		seq  int64
	}
	var ns []node
	for _, c := range children {
		if s, ok := parseSeqOf(c, latchInfix); ok {
			ns = append(ns, node{c, s})
		}
	}
	slices.SortFunc(ns, func(a, b node) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.name
	}
	return out
}

// leaderIn returns the leader among the children of dir: the lowest candidate node
// that still exists and is ephemeral (a persistent node named like a candidate was
// planted: it is nobody's, as the campaigns' rule treats it). ok is false when
// there is none.
func (d *zkDriver) leaderIn(ctx context.Context, dir string, children []string) (l driver.Leader, ok bool, err error) {
	for _, c := range candidates(children) {
		type got struct {
			data []byte
			st   *zk.Stat
		}
		g, err := call(ctx, func() (got, error) {
			data, st, err := d.conn.Get(dir + "/" + c)
			return got{data, st}, err
		}, nil)
		switch {
		case errors.Is(err, zk.ErrNoNode): // it resigned meanwhile: the next one leads
			continue
		case err != nil:
			return driver.Leader{}, false, fmt.Errorf("read %s: %w", c, err)
		case g.st.EphemeralOwner == 0: // planted
			continue
		}
		return driver.Leader{Value: string(g.data), Token: uint64(g.st.Czxid)}, true, nil
	}
	return driver.Leader{}, false, nil
}

func (d *zkDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	dir := ElectionPath(d.cfg.root, name)
	children, err := call(ctx, func() ([]string, error) {
		c, _, err := d.conn.Children(dir)
		return c, err
	}, nil)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return driver.Leader{}, fmt.Errorf("list %s: %w", dir, err)
	}
	l, ok, err := d.leaderIn(ctx, dir, children)
	switch {
	case err != nil:
		return driver.Leader{}, err
	case !ok:
		return driver.Leader{}, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
	}
	return l, nil
}

// WatchLeaders lists the election's directory with a watch, reports its lowest
// node when that changed, and waits for the next change.
func (d *zkDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	dir := ElectionPath(d.cfg.root, name)
	for {
		type list struct {
			children []string
			ev       <-chan zk.Event
		}
		l, err := call(ctx, func() (list, error) {
			c, _, ev, err := d.conn.ChildrenW(dir)
			if errors.Is(err, zk.ErrNoNode) { // no directory yet: wait for it
				var ok bool
				ok, _, ev, err = d.conn.ExistsW(dir)
				if err == nil && ok {
					return list{}, nil // created meanwhile: list again
				}
			}
			return list{c, ev}, err
		}, nil)
		if err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		ld, ok, err := d.leaderIn(ctx, dir, l.children)
		switch {
		case err != nil:
			return err
		case ok && ld.Token > after:
			found(ld)
			after = ld.Token
		}
		if l.ev == nil {
			continue
		}
		select {
		case e := <-l.ev:
			if e.Type == zk.EventNotWatching {
				return fmt.Errorf("watch %s: %w", dir, e.Err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

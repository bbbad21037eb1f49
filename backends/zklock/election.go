package zklock

import (
	"context"
	"errors"
	"fmt"
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

var (
	_ driver.Elector        = (*zkDriver)(nil)
	_ driver.CampaignWaiter = (*zkDriver)(nil)
)

// ElectionPath returns the directory of election name under root: the latch path a
// Curator LeaderLatch takes to campaign in it. Its ".elections" segment is never a
// lock directory (EscapeKey escapes '.').
func ElectionPath(root, name string) string { return root + "/.elections/" + EscapeKey(name) }

func (d *zkDriver) TryCampaign(ctx context.Context, name, value string, _ time.Duration) (driver.Lock, error) {
	return d.campaign(ctx, name, value, false)
}

// Campaign queues for the election and waits until its node is the lowest.
func (d *zkDriver) Campaign(ctx context.Context, name, value string, _ time.Duration) (driver.Lock, error) {
	return d.campaign(ctx, name, value, true)
}

func (d *zkDriver) campaign(ctx context.Context, name, value string, wait bool) (driver.Lock, error) {
	lk, err := d.acquireIn(ctx, ElectionPath(d.cfg.root, name), latchInfix, []byte(value), wait)
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// lowest returns the name of the lowest candidate node among children ("" if none).
func lowest(children []string) string {
	first, best := "", int64(-1)
	for _, c := range children {
		if s, ok := parseSeq(c, latchInfix); ok && (best < 0 || s < best) {
			first, best = c, s
		}
	}
	return first
}

func (d *zkDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	dir := ElectionPath(d.cfg.root, name)
	for {
		children, err := call(ctx, func() ([]string, error) {
			c, _, err := d.conn.Children(dir)
			return c, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) || err == nil && lowest(children) == "" {
			return driver.Leader{}, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
		}
		if err != nil {
			return driver.Leader{}, fmt.Errorf("list %s: %w", dir, err)
		}
		l, err := d.readLeader(ctx, dir+"/"+lowest(children))
		if errors.Is(err, zk.ErrNoNode) {
			continue // it resigned meanwhile: look again
		}
		return l, err
	}
}

func (d *zkDriver) readLeader(ctx context.Context, path string) (driver.Leader, error) {
	type got struct {
		data []byte
		st   *zk.Stat
	}
	g, err := call(ctx, func() (got, error) {
		data, st, err := d.conn.Get(path)
		return got{data, st}, err
	}, nil)
	if err != nil {
		return driver.Leader{}, err
	}
	return driver.Leader{Value: string(g.data), Token: uint64(g.st.Czxid)}, nil
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
		if first := lowest(l.children); first != "" {
			ld, err := d.readLeader(ctx, dir+"/"+first)
			switch {
			case errors.Is(err, zk.ErrNoNode): // gone already; the watch fires
			case err != nil:
				return fmt.Errorf("read %s: %w", first, err)
			case ld.Token > after:
				found(ld)
				after = ld.Token
			}
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

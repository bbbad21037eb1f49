package etcdlock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/spec"
)

// inspect reads the cluster's size and health (MemberList, then Status of every
// member) and says what they mean for the locks: how many members may fail
// (QuorumLoss, LeaderKill), and that lease expiry does not follow a wall clock
// (ClockJump).
func inspect(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	_, cli, err := connect(ctx, u)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: member list: %w", err)
	}
	n := len(ml.Members)
	var healthy int
	var troubles []string
	leader := ""
	for _, m := range ml.Members {
		st, err := memberStatus(ctx, cli, m.ClientURLs)
		switch {
		case err != nil:
			troubles = append(troubles, fmt.Sprintf("%s does not answer (%v)", m.Name, err))
		case len(st.Errors) > 0:
			troubles = append(troubles, fmt.Sprintf("%s reports %s", m.Name, strings.Join(st.Errors, "; ")))
		default:
			healthy++
			if st.Leader == m.ID {
				leader = m.Name
			}
		}
	}
	quorum := n/2 + 1
	setting := fmt.Sprintf("members=%d healthy=%d leader=%q", n, healthy, leader)
	if len(troubles) > 0 {
		setting += ": " + strings.Join(troubles, ", ")
	}
	q := spec.Finding{Scenario: spec.QuorumLoss, Setting: setting}
	switch spare := healthy - quorum; {
	case n == 1:
		q.Exposed = true
		q.Detail = "a single member: while it is down no lock can be taken, renewed or released (held leases then end at their TTL); it keeps every lock across a restart (raft log on disk)"
	case spare < 1:
		q.Exposed = true
		q.Detail = fmt.Sprintf("%d of %d members healthy and %d needed: one more failure stops the lock service", healthy, n, quorum)
	default:
		q.Detail = fmt.Sprintf("%d more member(s) may fail before the lock service stops (quorum %d of %d)", spare, quorum, n)
		if n%2 == 0 {
			q.Detail += fmt.Sprintf("; an even size tolerates no more failures than %d members would", n-1)
		}
	}
	l := spec.Finding{Scenario: spec.LeaderKill, Setting: setting, Exposed: n == 1 || leader == "",
		Detail: "when the leader dies another member is elected within an election timeout; held locks stay (raft), leases keep their TTLs"}
	switch {
	case n == 1:
		l.Detail = "a single member: there is no other to take over when it dies"
	case leader == "":
		l.Detail = "no healthy member reports itself the leader: the cluster cannot commit until one is elected"
	}
	c := spec.Finding{Scenario: spec.ClockJump, Setting: "lease expiry counts the leader's ticks",
		Detail: "a step of a wall clock moves no lease's expiry"}
	return []spec.Finding{q, l, c}, nil
}

// memberStatus asks the first of a member's client URLs that answers.
func memberStatus(ctx context.Context, cli *clientv3.Client, urls []string) (*clientv3.StatusResponse, error) {
	err := fmt.Errorf("no client URL")
	for _, ep := range urls {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, serr := cli.Status(sctx, ep)
		cancel()
		if serr == nil {
			return st, nil
		}
		err = serr
	}
	return nil, err
}

package zklock

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/dlock-go/dlock/spec"
)

// inspect connects as Open does and reports the session timeout the ensemble
// granted against the one requested (HolderCrash, HolderPause), the ensemble's size
// (QuorumLoss, LeaderKill), and whether the lock nodes are protected by an ACL
// (MutualExclusion).
func inspect(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	s, err := connect(ctx, u)
	if err != nil {
		return nil, err
	}
	defer s.conn.Close()
	var fs []spec.Finding
	got, asked := s.negotiated(), s.z.timeout
	t := spec.Finding{Scenario: spec.HolderCrash, Setting: fmt.Sprintf("session_timeout asked %v, granted %v", asked, got)}
	switch {
	case got == asked:
		t.Detail = fmt.Sprintf("a crashed or cut-off holder's locks free %v after the ensemble last heard from it", got)
	case got > asked:
		t.Exposed = true
		t.Detail = fmt.Sprintf("the ensemble raised the timeout (minSessionTimeout): a crashed holder blocks its keys for %v, not %v", got, asked)
	default:
		t.Scenario, t.Exposed = spec.HolderPause, true
		t.Detail = fmt.Sprintf("the ensemble cut the timeout (maxSessionTimeout): a holder silent for %v (a GC pause, a network blip) loses its locks, not after %v; the lease follows the granted value", got, asked)
	}
	fs = append(fs, t)
	fs = append(fs, ensembleFindings(ctx, s)...)
	a := spec.Finding{Property: spec.MutualExclusion, Setting: "lock nodes' ACL: " + aclName(s)}
	if s.z.user == "" {
		a.Exposed = true
		a.Detail = "any client of the ensemble may delete a holder's node (the next waiter is granted at once, while the holder hears of it only through its watch) or add children to a lock directory: give the URL user:password (digest) for a creator-only ACL"
	} else {
		a.Detail = "only sessions authenticated as " + s.z.user + " may delete or change the lock nodes or add children to the lock directories this client creates (a directory that existed before keeps its ACL)"
	}
	fs = append(fs, a, spec.Finding{Scenario: spec.ClockJump, Setting: "sessions expire by the servers' ticks",
		Detail: "a step of a wall clock moves no session's expiry"})
	return fs, nil
}

func aclName(s *session) string {
	if s.z.user == "" {
		return "world:anyone:cdrwa"
	}
	return "auth (creator only):cdrwa"
}

// ensembleFindings reads the ensemble's members from /zookeeper/config (empty for a
// standalone server).
func ensembleFindings(ctx context.Context, s *session) []spec.Finding {
	data, err := call(ctx, func() ([]byte, error) {
		b, _, err := s.conn.Get("/zookeeper/config")
		return b, err
	}, nil)
	q := spec.Finding{Scenario: spec.QuorumLoss}
	if err != nil {
		q.Exposed = true
		q.Setting = "/zookeeper/config unreadable: " + err.Error()
		q.Detail = "the ensemble's size is unknown"
		return []spec.Finding{q}
	}
	voters := 0
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "server.") && !strings.Contains(l, ":observer") {
			voters++
		}
	}
	l := spec.Finding{Scenario: spec.LeaderKill}
	switch {
	case voters <= 1:
		q.Exposed, l.Exposed = true, true
		q.Setting, l.Setting = "standalone server", "standalone server"
		q.Detail = "one server: while it is down no lock can be taken, and sessions (with their locks) end unless it returns within their timeout"
		l.Detail = "one server: there is no other to take over"
	default:
		quorum := voters/2 + 1
		q.Setting = fmt.Sprintf("ensemble of %d voters (quorum %d)", voters, quorum)
		l.Setting = q.Setting
		q.Exposed = voters-quorum < 1
		q.Detail = fmt.Sprintf("%d voter(s) may fail before the lock service stops", voters-quorum)
		l.Detail = "when the leader dies the others elect another; sessions and their locks survive if the election ends within the session timeout"
	}
	return []spec.Finding{q, l}
}

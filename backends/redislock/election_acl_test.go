package redislock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestCampaignWithoutPermission: a user whose ACL lacks a command the campaign
// script runs (XADD, the term log) gets the server's refusal from Campaign at once
// (not a wait until its context ends), and the failed script leaves no term behind
// (Redis does not undo a script's writes before the failing command), so a
// candidate with every permission is elected at once.
func TestCampaignWithoutPermission(t *testing.T) {
	pki := servertest.PKI(t)
	var rules []string
	for _, r := range redisops.LockUserACL {
		if r != "+xadd" {
			rules = append(rules, r)
		}
	}
	r := servertest.SecureRedis(t, pki, "adm1n-pw", "locker", secretPassword, rules)
	url := fmt.Sprintf("rediss://locker:%s@%s?%s", secretPassword, r.Addr(), pki.URLQuery())
	el, err := dlock.NewElection(servertest.Open(t, url), "acl-election")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = el.Campaign(ctx, "no-xadd")
	switch {
	case err == nil:
		t.Fatal("Campaign won without the permission to log the term")
	case ctx.Err() != nil:
		t.Fatalf("Campaign waited until its context ended instead of returning the server's refusal: %v", err)
	case !strings.Contains(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "can't run this command"):
		t.Fatalf("Campaign: %v, want the server's refusal (NOPERM; Redis 7.0 says \"can't run this command\" inside scripts)", err)
	case strings.Contains(err.Error(), secretPassword):
		t.Fatalf("the error shows the password: %v", err)
	}
	admin := adminClient(t, r, pki)
	if n, err := admin.Exists(ctx, redislock.ElectionKey("acl-election")).Result(); err != nil || n != 0 {
		t.Fatalf("the refused campaign left a term behind (EXISTS %d, %v)", n, err)
	}
	full, err := dlock.NewElection(servertest.Open(t, fmt.Sprintf("rediss://:adm1n-pw@%s?%s", r.Addr(), pki.URLQuery())), "acl-election")
	if err != nil {
		t.Fatal(err)
	}
	term, err := full.TryCampaign(ctx, "full")
	if err != nil {
		t.Fatalf("a candidate with every permission is not elected after the refused one: %v", err)
	}
	_ = term.Release(ctx)
}

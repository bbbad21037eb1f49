package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestElectionInterop: a dlock Election and etcd's concurrency.Election on
// ElectionName(prefix, name) are one election: neither leads while the other does,
// each hands over to the other on resignation, and each reads the other's leader
// and value.
func TestElectionInterop(t *testing.T) {
	eps := servertest.Etcd(t).Endpoints()
	const prefix, name = "/dlock-interop", "jobs/leader"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := etcdlock.New(newClient(t, eps), etcdlock.WithPrefix(prefix))
	defer l.Close()
	de, err := dlock.NewElection(l, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := concurrency.NewSession(newClient(t, eps), concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ee := concurrency.NewElection(s, etcdlock.ElectionName(prefix, name))

	// etcd leads: dlock sees it and waits.
	if err := ee.Campaign(ctx, "etcd-leader"); err != nil {
		t.Fatal(err)
	}
	if ld, err := de.Leader(ctx); err != nil || ld.Value != "etcd-leader" {
		t.Fatalf("dlock's Leader while etcd's Election leads: %+v, %v", ld, err)
	}
	observed := de.Observe(ctx)
	if ld := <-observed; ld.Value != "etcd-leader" {
		t.Fatalf("dlock's Observe first reported %+v, want etcd's leader", ld)
	}
	type result struct {
		ls  dlock.Lease
		err error
	}
	won := make(chan result, 1)
	go func() {
		ls, err := de.Campaign(ctx, "dlock-leader", dlock.WithTTL(5*time.Second), dlock.WithAutoRenew())
		won <- result{ls, err}
	}()
	select {
	case r := <-won:
		t.Fatalf("dlock's campaign returned while etcd's Election leads: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}

	// etcd resigns: dlock leads, and etcd sees it.
	if err := ee.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-won
	if r.err != nil {
		t.Fatalf("dlock's campaign after etcd resigned: %v", r.err)
	}
	if ld := <-observed; ld.Value != "dlock-leader" || ld.Token != r.ls.Token() {
		t.Errorf("dlock's Observe reported %+v, want dlock's own term (token %d)", ld, r.ls.Token())
	}
	resp, err := ee.Leader(ctx)
	if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != "dlock-leader" || resp.Kvs[0].CreateRevision != int64(r.ls.Token()) {
		t.Fatalf("etcd's Leader while dlock leads: %v, %v", resp, err)
	}
	eobs := ee.Observe(ctx)
	if got := <-eobs; string(got.Kvs[0].Value) != "dlock-leader" {
		t.Errorf("etcd's Observe reported %q, want dlock's leader", got.Kvs[0].Value)
	}
	etcdWon := make(chan error, 1)
	go func() { etcdWon <- ee.Campaign(ctx, "etcd-again") }()
	select {
	case err := <-etcdWon:
		t.Fatalf("etcd's campaign returned while dlock leads: %v", err)
	case <-time.After(500 * time.Millisecond):
	}

	// dlock resigns: etcd leads again.
	if err := r.ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-etcdWon; err != nil {
		t.Fatalf("etcd's campaign after dlock resigned: %v", err)
	}
	if got := <-eobs; string(got.Kvs[0].Value) != "etcd-again" {
		t.Errorf("etcd's Observe reported %q after dlock resigned, want etcd-again", got.Kvs[0].Value)
	}
	if ld := <-observed; ld.Value != "etcd-again" {
		t.Errorf("dlock's Observe reported %+v after dlock resigned, want etcd-again", ld)
	}
	if err := ee.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

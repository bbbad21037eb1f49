package etcdfence_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/etcdfence"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

func client(t *testing.T) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: servertest.Etcd(t).Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newGuard returns a guard whose fences (and data keys) are under a prefix of their
// own (the server is shared).
func newGuard(t *testing.T, cli *clientv3.Client) (*etcdfence.Guard, string) {
	p := "/test-" + fence.NewWriter()[:12]
	return etcdfence.New(cli, etcdfence.WithPrefix(p+"/fences/")), p + "/data/"
}

func putWrite(g *etcdfence.Guard, data string) fencetest.Write {
	return func(ctx context.Context, resource string, token uint64, writer, value string) error {
		_, err := g.Txn(ctx, resource, token, writer, clientv3.OpPut(data+resource, value))
		return err
	}
}

func get(t *testing.T, cli *clientv3.Client, data string) fencetest.Read {
	return func(ctx context.Context, resource string) string {
		resp, err := cli.Get(ctx, data+resource)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v, %v", data+resource, resp, err)
		}
		return string(resp.Kvs[0].Value)
	}
}

// TestLateWrite: on a real etcd, with etcdlock's tokens (create revisions), the
// stale holder's guarded transaction is refused and the value is the next holder's.
func TestLateWrite(t *testing.T) {
	cli := client(t)
	g, data := newGuard(t, cli)
	a := etcdlock.New(client(t), etcdlock.WithPrefix(data+"locks"))
	defer a.Close()
	b := etcdlock.New(client(t), etcdlock.WithPrefix(data+"locks"))
	defer b.Close()
	fencetest.LateWrite(t, a, b, "invoices/42", etcdlock.MinTTL, putWrite(g, data), get(t, cli, data))
}

// TestConcurrent: concurrent guarded transactions end with the largest token's
// value.
func TestConcurrent(t *testing.T) {
	cli := client(t)
	g, data := newGuard(t, cli)
	fencetest.Concurrent(t, "r", 30, putWrite(g, data), get(t, cli, data))
}

// TestTxn: the responses of the operations come back in order, in every accepting
// branch; tokens compare as numbers over all of uint64; a refusal runs nothing.
func TestTxn(t *testing.T) {
	cli := client(t)
	g, data := newGuard(t, cli)
	ctx := fencetest.Ctx(t, time.Minute)
	for _, c := range []struct {
		token  uint64
		writer string
	}{{9999999999, "a"}, {10000000000, "b"}, {10000000000, "b"}, {math.MaxUint64, "c"}} {
		resp, err := g.Txn(ctx, "r", c.token, c.writer, clientv3.OpPut(data+"x", c.writer), clientv3.OpGet(data+"x"))
		if err != nil {
			t.Fatalf("token %d: %v", c.token, err)
		}
		if len(resp) != 2 || resp[0].GetResponsePut() == nil || string(resp[1].GetResponseRange().Kvs[0].Value) != c.writer {
			t.Fatalf("token %d: responses %v", c.token, resp)
		}
	}
	var stale *fence.StaleError
	_, err := g.Txn(ctx, "r", math.MaxUint64, "d", clientv3.OpPut(data+"x", "d"))
	if !errors.As(err, &stale) || stale.Reason != fence.OtherWriter || stale.Fence != math.MaxUint64 {
		t.Fatalf("an equal token from another writer: %v", err)
	}
	if v := get(t, cli, data)(ctx, "x"); v != "c" {
		t.Fatalf("a refused transaction wrote: %q", v)
	}
	resp, err := cli.Get(ctx, g.Key("r"))
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "18446744073709551615 c" {
		t.Fatalf("the fence key holds %v (%v)", resp.Kvs, err)
	}
}

// TestTxnIfWithEtcdlockFence: etcdlock's Fence comparison, taken while the lease was
// held, refuses the write of a holder whose lease ended even where no newer grant
// has written yet (fence.ConditionFailed) — which the rule alone would accept.
func TestTxnIfWithEtcdlockFence(t *testing.T) {
	cli := client(t)
	g, data := newGuard(t, cli)
	l := etcdlock.New(client(t), etcdlock.WithPrefix(data+"locks"))
	defer l.Close()
	ctx := fencetest.Ctx(t, time.Minute)
	ls, err := l.Acquire(ctx, "inv", dlock.WithTTL(etcdlock.MinTTL))
	if err != nil {
		t.Fatal(err)
	}
	cmp, err := l.Fence(ls)
	if err != nil {
		t.Fatal(err)
	}
	writer := fence.NewWriter()
	if _, err := g.TxnIf(ctx, "inv", ls.Token(), writer, []clientv3.Cmp{cmp}, clientv3.OpPut(data+"inv", "1")); err != nil {
		t.Fatalf("the holder's write: %v", err)
	}
	<-ls.Done() // paused past its TTL: the lease ends, and etcd deletes the lock key
	// on its own clock, a moment later: watch for the delete from the grant on.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deleted := false
	for w := range cli.Watch(wctx, data+"locks", clientv3.WithPrefix(), clientv3.WithRev(int64(ls.Token())+1)) {
		for _, e := range w.Events {
			deleted = deleted || e.Type == clientv3.EventTypeDelete
		}
		if deleted || w.Err() != nil {
			break
		}
	}
	if !deleted {
		t.Fatal("the lock key outlived its lease")
	}
	_, err = g.TxnIf(ctx, "inv", ls.Token(), writer, []clientv3.Cmp{cmp}, clientv3.OpPut(data+"inv", "late"))
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Reason != fence.ConditionFailed || stale.Fence != ls.Token() {
		t.Fatalf("the late write with the lock's comparison: %v, want ConditionFailed", err)
	}
	if err := g.Check(ctx, "inv", ls.Token(), writer); err != nil {
		t.Fatalf("the rule alone accepts the same grant again: %v", err)
	}
	if v := get(t, cli, data)(ctx, "inv"); v != "1" {
		t.Fatalf("value %q", v)
	}
	// On a resource never written, the condition's failure is still ConditionFailed.
	if _, err := g.TxnIf(ctx, "fresh", 5, "w", []clientv3.Cmp{cmp}); !errors.As(err, &stale) || stale.Reason != fence.ConditionFailed || stale.Fence != 0 {
		t.Fatalf("a fresh resource with a failing condition: %v", err)
	}
}

package etcdfence_test

import (
	"context"
	"errors"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/etcdfence"
)

// A holder's put guarded by the fencing rule and by etcdlock's own comparison
// (the lock key still exists), in one transaction. (Needs a server: not run.)
func Example() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	locker := etcdlock.New(cli)
	defer locker.Close()
	guard := etcdfence.New(cli)

	lease, err := locker.Acquire(ctx, "invoices/42", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	held, err := locker.Fence(lease) // taken while held
	if err != nil {
		log.Fatal(err)
	}
	_, err = guard.TxnIf(ctx, "invoices/42", lease.Token(), fence.NewWriter(), []clientv3.Cmp{held},
		clientv3.OpPut("/invoices/42/status", "paid"))
	if errors.Is(err, fence.ErrStale) {
		log.Print("refused: ", err) // BelowFence, OtherWriter, or ConditionFailed: the lock is gone
	} else if err != nil {
		log.Fatal(err)
	}
}

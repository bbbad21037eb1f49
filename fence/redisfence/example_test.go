package redisfence_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
)

// A holder's SET guarded by the resource's fence, on a Redis Cluster: the key
// shares the resource's hash tag. (Needs a server: not run.)
func Example() {
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}})
	defer c.Close()
	guard := redisfence.New(c)

	var locker dlock.Locker // any backend with tokens
	lease, err := locker.Acquire(ctx, "invoice:{42}", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	writer := fence.NewWriter()

	err = guard.Set(ctx, "invoice:{42}", lease.Token(), writer, "status:{42}", "paid", 0)
	if errors.Is(err, fence.ErrStale) {
		log.Print("a newer holder has written: ", err)
	} else if err != nil {
		log.Fatal(err)
	}
}

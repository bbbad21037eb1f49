package etcdlock

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Semaphores and read-write locks, in revision order. The primitive named key is
// the set of keys under PrimitiveQueue(prefix, key), one per contender, named by
// its lease (as the mutex's) and valued "semaphore/<limit>", "rwlock/shared" or
// "rwlock/exclusive"; contenders are ordered by create revision. A semaphore's
// contender holds a permit when fewer than limit keys come before its own; an
// exclusive one when none does; a shared one when no exclusive one does. So
// waiters are served in arrival order, and a waiting exclusive contender keeps
// every later shared one out (writer preference). A waiter watches the queue (the
// last key before its own for a read-write lock) and keeps its lease alive; the
// token is its key's create revision.
//
// A contender that finds a key of the other kind, or a semaphore of another limit,
// in the queue takes its key out again and fails with dlock.ErrConflict.

// primitivesDir is the path segment under the prefix that holds every primitive's
// queue. url.PathEscape escapes '!', so no escaped key (a mutex's queue name) is
// this segment.
const primitivesDir = "!primitives"

// PrimitiveQueue is the etcd key prefix of the semaphore or read-write lock named
// key under prefix.
func PrimitiveQueue(prefix, key string) string {
	return strings.TrimRight(prefix, "/") + "/" + primitivesDir + "/" + url.PathEscape(key) + "/"
}

const (
	kindSemaphore = "semaphore"
	kindRW        = "rwlock"
	modeShared    = "shared"
	modeExclusive = "exclusive"
)

func (d *etcdDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.enqueue(ctx, key, PrimitiveQueue(d.prefix, key), kindSemaphore+"/"+strconv.Itoa(limit), ttl, false, semaphoreRule(key, limit))
}

func (d *etcdDriver) LockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.enqueue(ctx, key, PrimitiveQueue(d.prefix, key), kindSemaphore+"/"+strconv.Itoa(limit), ttl, true, semaphoreRule(key, limit))
}

func (d *etcdDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.enqueue(ctx, key, PrimitiveQueue(d.prefix, key), rwValue(shared), ttl, false, rwRule(key, shared))
}

func (d *etcdDriver) LockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.enqueue(ctx, key, PrimitiveQueue(d.prefix, key), rwValue(shared), ttl, true, rwRule(key, shared))
}

func rwValue(shared bool) string {
	if shared {
		return kindRW + "/" + modeShared
	}
	return kindRW + "/" + modeExclusive
}

// conflict returns ErrConflict if any of kvs is not of want (kind/setting).
func conflict(key, want string, kvs ...[]*mvccpb.KeyValue) error {
	kind, _, _ := strings.Cut(want, "/")
	for _, list := range kvs {
		for _, kv := range list {
			v := string(kv.Value)
			k, setting, _ := strings.Cut(v, "/")
			switch {
			case k != kind:
				return fmt.Errorf("%w: %q is in use as a %s", dlock.ErrConflict, key, k)
			case kind == kindSemaphore && v != want:
				return fmt.Errorf("%w: %q is in use as a semaphore with limit %s", dlock.ErrConflict, key, setting)
			}
		}
	}
	return nil
}

// semaphoreRule: a permit once fewer than limit keys come before ours.
func semaphoreRule(key string, limit int) rule {
	want := kindSemaphore + "/" + strconv.Itoa(limit)
	return func(preds, later []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int, error) {
		if err := conflict(key, want, preds, later); err != nil {
			return nil, 0, err
		}
		return preds, limit - 1, nil
	}
}

// rwRule: an exclusive lease once no key comes before ours, a shared one once no
// exclusive key does.
func rwRule(key string, shared bool) rule {
	return func(preds, later []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int, error) {
		if err := conflict(key, kindRW, preds, later); err != nil {
			return nil, 0, err
		}
		if !shared {
			return preds, 0, nil
		}
		var writers []*mvccpb.KeyValue
		for _, kv := range preds {
			if string(kv.Value) == kindRW+"/"+modeExclusive {
				writers = append(writers, kv)
			}
		}
		return writers, 0, nil
	}
}

package dlock

import "time"

// Option configures one Acquire or TryAcquire call.
type Option func(*AcquireOptions)

// AcquireOptions is the resolved form of the Options given to one call: what the one
// Locker every backend runs under (New) acts on — validation, the retry loop,
// auto-renewal and the observer. Backends never see it: a driver is given the key and
// the TTL, and the Holder through its context (driver.HolderFrom). Later options win.
type AcquireOptions struct {
	TTL       time.Duration // 0 means DefaultTTL (or the backend's session timeout)
	Retry     RetryStrategy // nil means the Locker's default
	AutoRenew bool
	Observer  Observer // nil means none
	Holder    Holder   // zero means none (WithHolder)
}

// applyOptions resolves opts in order; later options win.
func applyOptions(opts ...Option) AcquireOptions {
	var o AcquireOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// WithTTL sets how long the lease lasts without a refresh. A ttl <= 0 or above
// MaxTTL makes the call fail with ErrInvalidTTL. Backends whose leases last as long as a session
// (ZooKeeper, MySQL GET_LOCK) accept and ignore it; their Capabilities say so.
func WithTTL(ttl time.Duration) Option {
	return func(o *AcquireOptions) {
		o.TTL = ttl
		if ttl <= 0 {
			o.TTL = invalidTTL(ttl)
		}
	}
}

// invalidTTL keeps an explicit bad TTL distinguishable from "not set" (0).
func invalidTTL(ttl time.Duration) time.Duration {
	if ttl == 0 {
		return -1
	}
	return ttl
}

// WithRetry sets how Acquire waits between attempts where the backend has no wake-up
// of its own (or to bound the wait for one). A strategy that returns a negative delay
// makes Acquire give up with ErrNotAcquired. On a backend that queues waiters itself
// (ZooKeeper, etcd, mysql+getlock, mem), Acquire without WithRetry waits in that
// queue, served in arrival order; with WithRetry it retries TryAcquire by the
// strategy instead, which bounds the wait but gives up the order (a later waiter
// may be served first).
func WithRetry(s RetryStrategy) Option {
	return func(o *AcquireOptions) { o.Retry = s }
}

// WithAutoRenew refreshes the lease every TTL/3 until it is released. When a renewal
// finds the lock gone, or renewals fail until the validity deadline, Done closes with
// ErrLost. Auto-renewal cannot help a holder whose whole process is paused.
func WithAutoRenew() Option {
	return func(o *AcquireOptions) { o.AutoRenew = true }
}

// WithObserver reports this call and the lease it grants to obs. See Observe for a
// Locker-wide observer.
func WithObserver(obs Observer) Option {
	return func(o *AcquireOptions) { o.Observer = obs }
}

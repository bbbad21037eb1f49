package cli

import (
	"context"
	"flag"

	"github.com/dlock-go/dlock"
)

// primitiveFlags are the flags of "dlock run" that pick a primitive other than the
// mutex: a permit of a semaphore, or a side of a read-write lock.
type primitiveFlags struct {
	limit             int
	shared, exclusive bool
}

func (p *primitiveFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.limit, "limit", 0, "take one of `N` permits of the semaphore KEY instead of the lock KEY: at most N commands run at once\n(every dlock run on KEY must give the same N; another N while permits are held fails)")
	fs.BoolVar(&p.shared, "shared", false, "take a shared lease of the read-write lock KEY: runs beside other --shared commands, never beside an --exclusive one")
	fs.BoolVar(&p.exclusive, "exclusive", false, "take the exclusive lease of the read-write lock KEY: runs alone, with no --shared or --exclusive command on KEY")
}

// check returns a usage message for flags that do not go together ("" if they do).
func (p *primitiveFlags) check() string {
	switch {
	case p.limit < 0:
		return "--limit must be positive"
	case p.limit > 0 && (p.shared || p.exclusive):
		return "--limit (a semaphore) does not go with --shared or --exclusive (a read-write lock)"
	case p.shared && p.exclusive:
		return "--shared and --exclusive are the two sides of a read-write lock: give one"
	}
	return ""
}

// acquirer is what dlock run acquires: KEY's mutex, semaphore or read-write lock.
type acquirer interface {
	Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error)
	TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error)
}

// target returns the acquirer the flags ask for on l. An error wraps
// errors.ErrUnsupported when the backend has no such primitive, or
// dlock.ErrInvalidLimit.
func (p *primitiveFlags) target(l dlock.Locker, key string) (acquirer, error) {
	switch {
	case p.limit > 0:
		return dlock.NewSemaphore(l, key, p.limit)
	case p.shared || p.exclusive:
		m, err := dlock.NewRWMutex(l, key)
		if err != nil || p.exclusive {
			return m, err
		}
		return sharedSide{m}, nil
	}
	return mutex{l, key}, nil
}

type mutex struct {
	l   dlock.Locker
	key string
}

func (m mutex) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return m.l.Acquire(ctx, m.key, opts...)
}

func (m mutex) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return m.l.TryAcquire(ctx, m.key, opts...)
}

type sharedSide struct{ m *dlock.RWMutex }

func (s sharedSide) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return s.m.AcquireShared(ctx, opts...)
}

func (s sharedSide) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return s.m.TryAcquireShared(ctx, opts...)
}

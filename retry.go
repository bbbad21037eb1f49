package dlock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy says how long Acquire waits before attempt number attempt+1, after
// attempt (counted from 1) found the lock held. A negative result stops: Acquire
// returns ErrNotAcquired. A result below 1ms is raised to 1ms. Implementations must be safe for concurrent use; the ones
// here are stateless.
//
// Where the backend knows how long the holder still has, the wait is cut to that;
// where it can wake waiters on release (memlock, Redis), a release ends the wait early.
type RetryStrategy interface {
	Backoff(attempt int) time.Duration
}

// RetryFunc adapts a function to RetryStrategy.
type RetryFunc func(attempt int) time.Duration

// Backoff calls f.
func (f RetryFunc) Backoff(attempt int) time.Duration { return f(attempt) }

// ConstantBackoff waits d between attempts, forever (until ctx ends). Acquire waits
// at least 1ms between attempts whatever the strategy says, so ConstantBackoff(0)
// does not spin on the store.
func ConstantBackoff(d time.Duration) RetryStrategy {
	return RetryFunc(func(int) time.Duration { return d })
}

// ExponentialBackoff waits a random time in [0, min·2^(attempt-1)] capped at max
// ("full jitter"), so that waiters woken together do not retry together.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	if min <= 0 {
		min = time.Millisecond
	}
	if max < min {
		max = min
	}
	return RetryFunc(func(attempt int) time.Duration {
		d := max
		if attempt < 32 {
			if c := min << (attempt - 1); c > 0 && c < max {
				d = c
			}
		}
		return time.Duration(rand.Int64N(int64(d))) + 1
	})
}

// LimitRetry stops s after n retries (n+1 attempts in all). LimitRetry(s, 0) makes
// Acquire behave like TryAcquire.
func LimitRetry(s RetryStrategy, n int) RetryStrategy {
	return RetryFunc(func(attempt int) time.Duration {
		if attempt > n {
			return -1
		}
		return s.Backoff(attempt)
	})
}

// NoRetry gives up after the first attempt.
func NoRetry() RetryStrategy { return RetryFunc(func(int) time.Duration { return -1 }) }

// DefaultRetry is the strategy used when no WithRetry is given: exponential backoff
// with full jitter from 1ms up to 250ms between attempts, without limit.
var DefaultRetry = ExponentialBackoff(time.Millisecond, 250*time.Millisecond)

package redislock

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// NewSETNXWithClock is NewSETNX with now as the client's clock instead of time.Now,
// so that a test can run one client whose clock is skewed (SETNXGetSet trusts it).
func NewSETNXWithClock(client redis.UniversalClient, v Variant, now func() time.Time) dlock.Locker {
	return newSETNX(client, v, false, now)
}

// The key layout and the fair mode's scripts, for tests that look into the store.
var (
	QueueKey    = queueKey
	DeadlineKey = deadlineKey
	ElectionKey = electionKey
	// ElectionTermKey and ElectionLogKey: the term counter and the log
	// (TestElectionStateExpires).
	ElectionTermKey = electionTermKey
	ElectionLogKey  = electionLogKey
	FairAcquire     = fairAcquire
	FairRelease     = fairRelease
	WriterWaitKey   = writerWaitKey
	// SemaphoreWaitKeys: the waiters of a semaphore or of a read-write lock's writers.
	SemaphoreWaitKeys = semaphoreWaitKeys
	// CandidatesKeys: an election's waiting candidates.
	CandidatesKeys = candidatesKeys
)

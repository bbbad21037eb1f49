package bench

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/internal/measure"
)

// TestMaxPassedTellsBargingFromQueueing: four clients of one mem store hold the lock
// 1ms each time. Queued (mem's own wait, first come first served) a waiter sees each
// other client take the lock once at most, one round; polling instead (a retry
// strategy), the client that releases takes the lock straight back while the
// pollers sleep, and some waiter is passed over many rounds. So the count fails a
// lock that lets clients barge in, and passes a fair one.
func TestMaxPassedTellsBargingFromQueueing(t *testing.T) {
	store := memlock.NewStore()
	run := func(name string, opts ...dlock.Option) Contention {
		var count passCount
		var ls []dlock.Locker
		for range 4 {
			l := memlock.New(memlock.WithStore(store))
			defer l.Close()
			ls = append(ls, passCounted{l, &count})
		}
		c, err := measure.Contend(context.Background(), ls, name, 300*time.Millisecond, time.Millisecond, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return Contention{Contention: c, MaxPassed: int(count.max.Load())}
	}
	queued := run("queued")
	// One round, and the grant in flight when the request was sent.
	if queued.MaxPassed > 4 {
		t.Errorf("queued clients: a waiter was passed %d times (%.1f rounds), want at most 4", queued.MaxPassed, queued.MaxRounds())
	}
	polling := run("polling", dlock.WithRetry(dlock.ConstantBackoff(5*time.Millisecond)))
	if polling.MaxRounds() <= 5 {
		t.Errorf("clients polling every 5ms: longest wait %.1f rounds, want more than 5 (the releaser takes the lock straight back)", polling.MaxRounds())
	}
	t.Logf("queued: %v, %d passed | polling: %v, %d passed", queued, queued.MaxPassed, polling, polling.MaxPassed)
}

package redlock

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// Subscribe wakes a waiter for key when any master announces a release of it (the
// release script publishes on redisops.Channel(key) when it deletes the key). One
// message is enough: a waiter only looks again, and a wake-up that finds the lock
// still held costs one attempt. It subscribes on every master in parallel and
// returns once a majority of the subscriptions are confirmed (a majority releases
// every lock, so a majority of subscriptions hears every release), or after
// subscribeWait when masters are down or slow; the others join when they are ready.
//
// Not guaranteed: expiry announces nothing, nor does a master that is down; waiters
// keep the retry strategy's backoff, cut to the holder's remaining TTL.
func (d *redlockDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.subscribe(func(r *redisops.Releases) (<-chan struct{}, func(), error) { return r.Subscribe(ctx, key) })
}

// subscribe makes the subscription sub on every master in parallel and merges their
// messages into one channel, as Subscribe says.
func (d *redlockDriver) subscribe(sub func(*redisops.Releases) (<-chan struct{}, func(), error)) (<-chan struct{}, func(), error) {
	w := &waiter{wake: make(chan struct{}, 1), stopped: make(chan struct{}), changed: make(chan struct{}, 1)}
	ready := make(chan struct{}, len(d.nodes))
	d.inflight.Add(len(d.nodes)) // Close waits for the subscriptions still on their way
	for i := range d.nodes {
		go func() {
			defer d.inflight.Done()
			ch, stop, err := sub(d.nodes[i].releases)
			if err == nil {
				w.add(ch, stop)
			}
			ready <- struct{}{}
		}()
	}
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
wait:
	for range d.quorum {
		select {
		case <-ready:
		case <-t.C:
			break wait
		}
	}
	w.wg.Add(1)
	go w.forward()
	return w.wake, w.stop, nil
}

// subscribeWait bounds how long Subscribe waits for a majority of confirmations. A
// release that comes before they are confirmed may go unheard: the waiter then
// retries after its backoff.
const subscribeWait = 100 * time.Millisecond

// waiter merges the release messages of every master into wake.
type waiter struct {
	wake    chan struct{}
	stopped chan struct{}
	changed chan struct{} // a subscription joined: forward looks again
	wg      sync.WaitGroup

	mu    sync.Mutex
	chans []<-chan struct{}
	stops []func()
	done  bool
}

// add records one master's subscription; after stop it ends it at once.
func (w *waiter) add(ch <-chan struct{}, stop func()) {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		stop()
		return
	}
	w.chans = append(w.chans, ch)
	w.stops = append(w.stops, stop)
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// forward passes each master's wake-up on to wake until stop.
func (w *waiter) forward() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.stopped)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.changed)},
		}
		for _, ch := range w.chans {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		w.mu.Unlock()
		chosen, _, _ := reflect.Select(cases)
		switch chosen {
		case 0:
			return
		case 1:
			continue
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// stop ends every subscription made so far and the forwarding (it waits for that);
// a subscription still on its way ends as soon as it is made.
func (w *waiter) stop() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	w.done = true
	stops := w.stops
	w.mu.Unlock()
	close(w.stopped)
	for _, s := range stops {
		s()
	}
	w.wg.Wait()
}

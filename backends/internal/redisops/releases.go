package redisops

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Releases tells waiters when a lock may have been released: it listens on the
// release channels (Channel) of the keys someone waits for, over one pub/sub
// connection per Releases, subscribed to each channel once however many waiters it
// has. Safe for concurrent use. The zero value is not usable; call NewReleases.
//
// Not guaranteed: expiry publishes nothing, nor does a release by another library
// or a plain DEL; messages published while the connection is down are lost (after a
// reconnection every waiter is woken once, to look again). Waiters must keep a
// bounded backoff of their own.
type Releases struct {
	c redis.UniversalClient

	mu     sync.Mutex // guards the fields below and orders SUBSCRIBE/UNSUBSCRIBE writes
	ps     *redis.PubSub
	loop   chan struct{} // closed when the receive loop has ended
	topics map[string]*topic
	closed bool
}

// topic is the state of one channel.
type topic struct {
	waiters    map[chan struct{}]bool
	subscribed bool          // a SUBSCRIBE was sent after the last UNSUBSCRIBE
	pending    int           // SUBSCRIBEs sent whose confirmation has not arrived
	confirmed  chan struct{} // closed when pending drops to 0
}

// NewReleases returns a Releases that subscribes through c when first asked.
func NewReleases(c redis.UniversalClient) *Releases {
	return &Releases{c: c, topics: map[string]*topic{}}
}

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("release notifications closed")

// Subscribe starts listening for releases of key's lock. It returns once the server
// has confirmed the subscription (or ctx ends, or MaxConfirmWait passes, or the
// subscription could not be sent: the channel then starts working once the
// connection is back), so that a release published after Subscribe returned is not
// missed while the connection stays up. wake receives (without blocking the sender;
// it holds one value) on each release and after each reconnection. stop must be
// called.
func (r *Releases) Subscribe(ctx context.Context, key string) (wake <-chan struct{}, stop func(), err error) {
	return r.subscribe(ctx, Channel(key))
}

// SubscribeTurn starts listening on TurnChannel(key, name), where the fair mode's
// release tells the waiter named name that the lock is its turn: the same
// guarantees as Subscribe, without the messages meant for other waiters (a release
// reaches one waiter however many wait, in this process or others).
func (r *Releases) SubscribeTurn(ctx context.Context, key, name string) (wake <-chan struct{}, stop func(), err error) {
	return r.subscribe(ctx, TurnChannel(key, name))
}

// SubscribeOwn is Subscribe and SubscribeTurn at once: wake receives on each
// release of key's lock and when it is the turn of the waiter named name.
func (r *Releases) SubscribeOwn(ctx context.Context, key, name string) (wake <-chan struct{}, stop func(), err error) {
	return r.subscribe(ctx, Channel(key), TurnChannel(key, name))
}

// SubscribeTurns is SubscribeTurn for a waiter named name on each of keys (a set
// of keys waited for as one): wake receives when any of them is its turn.
func (r *Releases) SubscribeTurns(ctx context.Context, keys []string, name string) (wake <-chan struct{}, stop func(), err error) {
	chs := make([]string, len(keys))
	for i, k := range keys {
		chs[i] = TurnChannel(k, name)
	}
	return r.subscribe(ctx, chs...)
}

// subscribe registers one wake channel on each of chs, sending SUBSCRIBE for those
// not subscribed yet, and waits for their confirmations (see Subscribe).
func (r *Releases) subscribe(ctx context.Context, chs ...string) (wake <-chan struct{}, stop func(), err error) {
	w := make(chan struct{}, 1)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, ErrClosed
	}
	var sendErr error
	confirmed := make([]chan struct{}, 0, len(chs))
	for _, ch := range chs {
		t := r.topics[ch]
		if t == nil {
			t = &topic{waiters: map[chan struct{}]bool{}}
			r.topics[ch] = t
		}
		t.waiters[w] = true
		if !t.subscribed {
			t.subscribed = true
			if t.pending == 0 {
				t.confirmed = make(chan struct{})
			}
			t.pending++
			if err := r.subscribeLocked(ctx, ch); err != nil && sendErr == nil {
				sendErr = err
			}
		}
		confirmed = append(confirmed, t.confirmed)
	}
	r.mu.Unlock()

	stop = func() {
		for _, ch := range chs {
			r.unsubscribe(ch, w)
		}
	}
	if sendErr == nil {
		t := time.NewTimer(MaxConfirmWait)
		defer t.Stop()
		for _, c := range confirmed {
			select {
			case <-c:
				continue
			case <-ctx.Done():
			case <-t.C:
			}
			break
		}
	}
	return w, stop, nil
}

// MaxConfirmWait bounds how long Subscribe waits for the server to confirm a
// subscription (a server that is slow to answer, a connection being re-established).
const MaxConfirmWait = time.Second

// subscribeLocked sends SUBSCRIBE ch, starting the pub/sub connection and the
// receive loop on first use; the caller holds r.mu.
func (r *Releases) subscribeLocked(ctx context.Context, ch string) error {
	if r.ps != nil {
		return r.ps.Subscribe(ctx, ch)
	}
	// go-redis sends the first SUBSCRIBE here and keeps ch in its list even if the
	// write fails: it subscribes again when the connection comes back.
	r.ps = r.c.Subscribe(ctx, ch)
	msgs := r.ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
	r.loop = make(chan struct{})
	go r.receive(msgs)
	return nil
}

func (r *Releases) unsubscribe(ch string, w chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.topics[ch]
	if t == nil {
		return
	}
	delete(t.waiters, w)
	if len(t.waiters) > 0 || !t.subscribed {
		return
	}
	t.subscribed = false
	if t.pending == 0 {
		delete(r.topics, ch)
	}
	if !r.closed {
		_ = r.ps.Unsubscribe(context.Background(), ch) // a failure only leaves a channel we ignore
	}
}

// receive dispatches confirmations and messages until the PubSub is closed.
func (r *Releases) receive(msgs <-chan any) {
	defer close(r.loop)
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				r.confirm(m.Channel)
			}
		case *redis.Message:
			r.mu.Lock()
			if t := r.topics[m.Channel]; t != nil {
				t.wake()
			}
			r.mu.Unlock()
		}
	}
}

// confirm records one subscription confirmed by the server for ch.
func (r *Releases) confirm(ch string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.topics[ch]
	if t == nil {
		return
	}
	if t.pending == 0 {
		// Not one we sent: go-redis subscribed again after a reconnection, and any
		// release while the connection was down went unheard.
		t.wake()
		return
	}
	t.pending--
	if t.pending > 0 {
		return
	}
	close(t.confirmed)
	if !t.subscribed && len(t.waiters) == 0 {
		delete(r.topics, ch)
	}
}

// wake wakes every waiter of the topic.
func (t *topic) wake() {
	for w := range t.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Close ends the pub/sub connection and waits for the receive loop to end. Waiters
// that have not called stop are simply never woken again. Idempotent.
func (r *Releases) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	ps, loop := r.ps, r.loop
	r.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-loop
	return err
}

package pglock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// hub is a Locker's one LISTEN connection: it listens on the lock table's channel
// and hands each notification to the waiters subscribed to its payload (a key's
// releases, or a fair waiter's turn). It connects on the first subscription and
// again after a failure; a reconnection wakes every waiter (a notification may
// have been lost meanwhile).
type hub struct {
	cfg     *pgx.ConnConfig
	channel string

	mu       sync.Mutex
	subs     map[string]map[chan struct{}]struct{}
	started  bool
	closed   bool
	off      string        // why notifications are off ("" while on)
	ready    chan struct{} // closed once LISTEN is in force on the current connection
	lastErr  error         // the last connection attempt's failure, nil once ready
	attempts chan struct{} // closed (and replaced) after each failed attempt
	stop     context.CancelFunc
	done     chan struct{} // closed when the listening goroutine has returned
}

func newHub(cfg *pgx.ConnConfig, channel string) *hub {
	return &hub{cfg: cfg.Copy(), channel: channel, subs: map[string]map[chan struct{}]struct{}{},
		ready: make(chan struct{}), attempts: make(chan struct{})}
}

// disable turns the notifications off for good (a pooler cannot carry them):
// subscribe fails with why, and waiters fall back to their retry strategy.
func (h *hub) disable(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.off = why
}

// subscribe returns a channel that receives a value (it may drop values and fire
// spuriously) when a notification with payload arrives, once LISTEN is in force: a
// notification sent after subscribe returned is not missed. It fails when the
// listening connection cannot be made or notifications are off.
func (h *hub) subscribe(ctx context.Context, payload string) (<-chan struct{}, func(), error) {
	h.mu.Lock()
	if h.off != "" || h.closed {
		why := h.off
		if h.closed {
			why = "the Locker is closed"
		}
		h.mu.Unlock()
		return nil, nil, fmt.Errorf("no wake-ups: %s", why)
	}
	if !h.started {
		h.started = true
		lctx, cancel := context.WithCancel(context.Background())
		h.stop, h.done = cancel, make(chan struct{})
		go h.run(lctx)
	}
	c := make(chan struct{}, 1)
	if h.subs[payload] == nil {
		h.subs[payload] = map[chan struct{}]struct{}{}
	}
	h.subs[payload][c] = struct{}{}
	ready, attempt := h.ready, h.attempts
	h.mu.Unlock()
	unsub := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[payload], c)
		if len(h.subs[payload]) == 0 {
			delete(h.subs, payload)
		}
	}
	select {
	case <-ready:
		return c, unsub, nil
	case <-attempt:
		h.mu.Lock()
		err := h.lastErr
		h.mu.Unlock()
		unsub()
		return nil, nil, fmt.Errorf("listen: %w", err)
	case <-ctx.Done():
		unsub()
		return nil, nil, ctx.Err()
	}
}

// listenRetry bounds the pause between two attempts to (re)connect the listener.
const listenRetry = time.Second

// run keeps a listening connection until ctx ends.
func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	pause := 10 * time.Millisecond
	for ctx.Err() == nil {
		err := h.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		h.lastErr = err
		close(h.attempts)
		h.attempts = make(chan struct{})
		if isClosed(h.ready) {
			h.ready = make(chan struct{})
		}
		h.mu.Unlock()
		h.wakeAll() // notifications may have been lost while the connection failed
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, listenRetry)
	}
}

// listen connects, LISTENs and delivers notifications until the connection fails
// (its error) or ctx ends.
func (h *hub) listen(ctx context.Context) error {
	c, err := pgx.ConnectConfig(ctx, h.cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	if _, err := c.Exec(ctx, "LISTEN "+quoteIdent(h.channel)); err != nil {
		return err
	}
	h.mu.Lock()
	h.lastErr = nil
	close(h.ready)
	h.mu.Unlock()
	h.wakeAll() // a release between a waiter's try and this LISTEN was not heard
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		h.deliver(n.Payload)
	}
}

func (h *hub) deliver(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs[payload] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cs := range h.subs {
		for c := range cs {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// close stops the listener and waits for it.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	stop, done := h.stop, h.done
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

package pglock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// hub is a Locker's LISTEN connection: it listens on the lock table's channel
// and hands each notification to the waiters subscribed to its payload (a key's
// releases, or a queued waiter's turn). It connects on the first subscription and
// again after a failure; a reconnection wakes every waiter (a notification may
// have been lost meanwhile). Once no one has been subscribed for listenLinger it
// closes the connection, and the next subscription connects again: PostgreSQL
// signals every session of the database that listens on each NOTIFY, and each
// reads the notification queue in a transaction of its own, so a Locker that
// waited once and listened for good would cost every release in the database a
// transaction for as long as it lives.
type hub struct {
	cfg     *pgx.ConnConfig
	channel string
	linger  time.Duration // listenLinger when it was made

	mu     sync.Mutex
	subs   map[string]map[chan struct{}]struct{}
	n      int         // subscriptions
	cur    *listener   // the listening connection; nil while none is kept
	idle   *time.Timer // ends cur once no one has subscribed for listenLinger
	closed bool
	off    string         // why notifications are off ("" while on)
	runs   sync.WaitGroup // the listeners' goroutines
}

// listener is one run of the listening connection (hub.run), until the hub stops
// it for idleness or closes. Its fields are guarded by the hub's mu.
type listener struct {
	stop     context.CancelFunc
	ready    chan struct{} // closed once LISTEN is in force on the current connection
	lastErr  error         // the last connection attempt's failure, nil once ready
	attempts chan struct{} // closed (and replaced) after each failed attempt
}

// listenLinger is how long a hub keeps its connection after its last subscription
// ended: a Locker that waits again within it is heard at once; one that has not
// waited for longer costs the server nothing on other Lockers' releases.
var listenLinger = 5 * time.Second

func newHub(cfg *pgx.ConnConfig, channel string) *hub {
	return &hub{cfg: cfg.Copy(), channel: channel, linger: listenLinger, subs: map[string]map[chan struct{}]struct{}{}}
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
	if h.idle != nil {
		h.idle.Stop() // should it have fired already, it finds a subscription and keeps cur
		h.idle = nil
	}
	if h.cur == nil {
		lctx, cancel := context.WithCancel(context.Background())
		h.cur = &listener{stop: cancel, ready: make(chan struct{}), attempts: make(chan struct{})}
		h.runs.Add(1)
		go h.run(lctx, h.cur)
	}
	c := make(chan struct{}, 1)
	if h.subs[payload] == nil {
		h.subs[payload] = map[chan struct{}]struct{}{}
	}
	h.subs[payload][c] = struct{}{}
	h.n++
	l := h.cur
	ready, attempt := l.ready, l.attempts
	h.mu.Unlock()
	unsub := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[payload], c)
		if len(h.subs[payload]) == 0 {
			delete(h.subs, payload)
		}
		h.n--
		if h.n == 0 && h.cur != nil && !h.closed {
			cur := h.cur
			h.idle = time.AfterFunc(h.linger, func() { h.stopIdle(cur) })
		}
	}
	select {
	case <-ready:
		return c, unsub, nil
	case <-attempt:
		h.mu.Lock()
		err := l.lastErr
		h.mu.Unlock()
		unsub()
		return nil, nil, fmt.Errorf("listen: %w", err)
	case <-ctx.Done():
		unsub()
		return nil, nil, ctx.Err()
	}
}

// stopIdle ends the listener l if it is still the hub's and no one subscribed
// since its last subscription ended.
func (h *hub) stopIdle(l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == l && h.n == 0 {
		h.cur = nil
		l.stop()
	}
}

// listenRetry bounds the pause between two attempts to (re)connect the listener.
const listenRetry = time.Second

// run keeps l's listening connection until ctx ends.
func (h *hub) run(ctx context.Context, l *listener) {
	defer h.runs.Done()
	pause := 10 * time.Millisecond
	for ctx.Err() == nil {
		err := h.listen(ctx, l)
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		l.lastErr = err
		close(l.attempts)
		l.attempts = make(chan struct{})
		if isClosed(l.ready) {
			l.ready = make(chan struct{})
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
func (h *hub) listen(ctx context.Context, l *listener) error {
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
	l.lastErr = nil
	close(l.ready)
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
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.cur != nil {
		h.cur.stop()
		h.cur = nil
	}
	h.mu.Unlock()
	h.runs.Wait()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// hub is a Locker's LISTEN connection: it listens on the lock table's channel
// and hands each notification to the waiters subscribed to its payload (a key's
// releases, or a queued waiter's turn). It connects on the first subscription and
// again after a failure; a reconnection wakes every waiter (a notification may
// have been lost meanwhile). PostgreSQL signals every session of the database that
// listens at each NOTIFY, and each reads the notification queue in a transaction
// of its own, so the hub listens only while someone is subscribed: once no one is,
// it leaves the channel (UNLISTEN) and the connection idles, costing the server
// nothing on other Lockers' releases; the next subscription LISTENs on it again.
// After listenLinger without a subscription it closes the connection.
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
	ready    chan struct{}      // closed while LISTEN is in force on the current connection
	lastErr  error              // the last connection attempt's failure, nil once ready
	attempts chan struct{}      // closed (and replaced) after each failed attempt
	kick     chan struct{}      // tells its goroutine the subscriptions changed (buffered)
	halt     context.CancelFunc // interrupts its wait for a notification; nil while none runs
}

// listenLinger is how long a hub keeps its connection (not listening) after its
// last subscription ended: a Locker that waits again within it listens with one
// statement instead of a new session.
var listenLinger = 5 * time.Second

func newHub(cfg *pgx.ConnConfig, channel string) *hub {
	c := cfg.Copy()
	// The listener interrupts its own wait for a notification to LISTEN or
	// UNLISTEN: the interruption must only stop the read (a deadline on the
	// socket), not send the server a cancel request, which could cancel the next
	// statement, nor close the connection.
	c.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	return &hub{cfg: c, channel: channel, linger: listenLinger, subs: map[string]map[chan struct{}]struct{}{}}
}

// poke tells the listener that the subscriptions changed (h.mu held).
func (h *hub) poke() {
	if h.cur == nil {
		return
	}
	select {
	case h.cur.kick <- struct{}{}:
	default:
	}
	if h.cur.halt != nil {
		h.cur.halt()
	}
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
		h.cur = &listener{stop: cancel, ready: make(chan struct{}), attempts: make(chan struct{}), kick: make(chan struct{}, 1)}
		h.runs.Add(1)
		go h.run(lctx, h.cur)
	}
	c := make(chan struct{}, 1)
	if h.subs[payload] == nil {
		h.subs[payload] = map[chan struct{}]struct{}{}
	}
	h.subs[payload][c] = struct{}{}
	h.n++
	if h.n == 1 {
		h.poke()
	}
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
			h.poke() // UNLISTEN
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

// listenTimeout bounds a LISTEN or UNLISTEN.
const listenTimeout = 5 * time.Second

// execFor runs sql on c, for listenTimeout at most.
func execFor(ctx context.Context, c *pgx.Conn, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, listenTimeout)
	defer cancel()
	_, err := c.Exec(ctx, sql)
	return err
}

// errIdleLost: the connection was lost while no one was subscribed (it idled, or
// was leaving the channel), so no notification was missed; the listener connects
// again at once, and subscribers that came meanwhile wait for its LISTEN.
var errIdleLost = errors.New("idle listening connection lost")

// listenRetry bounds the pause between two attempts to (re)connect the listener.
const listenRetry = time.Second

// run keeps l's listening connection until ctx ends.
func (h *hub) run(ctx context.Context, l *listener) {
	defer h.runs.Done()
	pause := 10 * time.Millisecond
	again := false // a connection failed: its subscribers may have missed notifications
	for ctx.Err() == nil {
		err := h.listen(ctx, l, &again)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errIdleLost) {
			continue // at once, and the waiting subscribers are not told
		}
		again = true
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

// listen connects and, while anyone is subscribed, LISTENs and delivers
// notifications, until the connection fails (its error) or ctx ends. *again: an
// earlier connection failed, so its subscribers may have missed notifications;
// the first LISTEN wakes them all, and clears it. LISTEN and UNLISTEN may take
// listenTimeout at most (a connection that went dead while it idled).
func (h *hub) listen(ctx context.Context, l *listener, again *bool) error {
	c, err := pgx.ConnectConfig(ctx, h.cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	listening, idled := false, false
	for {
		h.mu.Lock()
		want := h.n > 0
		if listening && !want {
			// Not in force from here: a subscription that comes now waits for the
			// next LISTEN.
			l.ready = make(chan struct{})
		}
		h.mu.Unlock()
		switch {
		case want && !listening:
			if err := execFor(ctx, c, "LISTEN "+quoteIdent(h.channel)); err != nil {
				if idled {
					return fmt.Errorf("%w: %w", errIdleLost, err)
				}
				return err
			}
			listening = true
			h.mu.Lock()
			l.lastErr = nil
			close(l.ready)
			h.mu.Unlock()
			if *again {
				h.wakeAll() // a release while the connection was down was not heard
				*again = false
			}
		case !want && listening:
			if err := execFor(ctx, c, "UNLISTEN "+quoteIdent(h.channel)); err != nil {
				return fmt.Errorf("%w: %w", errIdleLost, err) // no one listened: nothing was missed
			}
			listening, idled = false, true
		}
		if !listening {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-l.kick:
			}
			idled = true // whatever happened to the connection meanwhile, no one listened
			continue
		}
		wctx, halt := context.WithCancel(ctx)
		h.mu.Lock()
		select {
		case <-l.kick: // the subscriptions changed since they were read
			h.mu.Unlock()
			halt()
			continue
		default:
		}
		l.halt = halt
		h.mu.Unlock()
		n, err := c.WaitForNotification(wctx)
		h.mu.Lock()
		l.halt = nil
		h.mu.Unlock()
		halt()
		if n != nil { // also with an error: received before the interruption
			h.deliver(n.Payload)
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() == nil || c.IsClosed():
			return err
		}
		// Interrupted by poke: the connection stands; look at the subscriptions.
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

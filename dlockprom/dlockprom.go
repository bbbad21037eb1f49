// Package dlockprom exports dlock's Observer events as Prometheus metrics.
//
//	obs, err := dlockprom.New(prometheus.DefaultRegisterer)
//	if err != nil { … }
//	locker = dlock.Instrument(locker, obs) // or dlock.WithObserver(obs) on one call
//
// Metrics (namespace "dlock" unless WithNamespace says otherwise; every one has the
// label backend, the backend's name such as "redis" or "mem"):
//
//	dlock_acquire_duration_seconds{backend,outcome}  histogram of Acquire/TryAcquire calls;
//	                                                 outcome is acquired, not_acquired or error
//	dlock_acquire_attempts_total{backend}            requests made to the backend by those calls
//	dlock_acquire_contended_total{backend}           calls that found the lock held at least once
//	dlock_renewals_total{backend,outcome}            refreshes, explicit or automatic;
//	                                                 outcome is ok, not_held or error
//	dlock_lease_ends_total{backend,reason}           leases that ended; reason is released,
//	                                                 expired, lost, closed or other
//	dlock_lease_losses_total{backend,cause}          leases that ended without their owner, by
//	                                                 why (dlock.Cause): expired, unreachable,
//	                                                 refused, deleted or session_ended
//	dlock_leases_held{backend}                       leases granted and not yet ended
//
// Lock keys are deliberately not a label: they are unbounded, and a label per key would
// make the number of series grow without limit.
//
// Cost: nothing is measured unless an Observer is set (dlock checks for nil before it
// reads the clock). With one set, Observe does no allocation once a backend has been
// seen: the per-backend series are looked up once and kept.
//
// What is not guaranteed: dlock_leases_held counts what this process's Observer saw
// granted and ended; a lease acquired without this Observer and ended with it (or the
// other way round) skews it, and a lease that ends at the very moment it is granted may
// be counted as ended before it is counted as held (the gauge then reads one low for
// that instant).
package dlockprom

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-go/dlock"
)

// Label values of the outcome and reason labels.
const (
	OutcomeAcquired    = "acquired"     // the call granted a lease
	OutcomeNotAcquired = "not_acquired" // the lock was held, the wait ended or the retry strategy gave up
	OutcomeError       = "error"        // the backend failed, the input was invalid, or the Locker was closed
	OutcomeOK          = "ok"           // a refresh succeeded
	OutcomeNotHeld     = "not_held"     // a refresh found the lock no longer ours

	ReasonReleased = "released"
	ReasonExpired  = "expired"
	ReasonLost     = "lost"
	ReasonClosed   = "closed"
	ReasonOther    = "other"
)

// Label values of the cause label of dlock_lease_losses_total: one per dlock.Cause.
// A loss of expired is also counted under lease_ends_total{reason="expired"}, every
// other under reason="lost".
const (
	CauseExpired     = "expired"       // dlock.CauseExpired
	CauseUnreachable = "unreachable"   // dlock.CauseUnreachable
	CauseRefused     = "refused"       // dlock.CauseRefused
	CauseDeleted     = "deleted"       // dlock.CauseDeleted
	CauseSession     = "session_ended" // dlock.CauseSession
)

// causes are the label values of the causes, in the order of dlock's Cause values
// (CauseExpired is 1).
var causes = []string{CauseExpired, CauseUnreachable, CauseRefused, CauseDeleted, CauseSession}

// DefaultBuckets are the acquire-latency histogram buckets, in seconds: from 100µs (an
// in-process lock) to 60s (a long wait behind another holder).
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Option configures New.
type Option func(*config)

type config struct {
	namespace string
	buckets   []float64
	labels    prometheus.Labels
}

// WithNamespace sets the metric-name prefix (default "dlock"). An empty namespace
// leaves the names unprefixed (acquire_duration_seconds, …).
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithBuckets sets the acquire-latency histogram buckets in seconds (default
// DefaultBuckets).
func WithBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// WithConstLabels adds fixed labels to every metric, e.g. {"service": "billing"} to tell
// several Observers in one process apart.
func WithConstLabels(l prometheus.Labels) Option { return func(c *config) { c.labels = l } }

// Observer is a dlock.Observer that updates Prometheus metrics. It is safe for
// concurrent use. Create it with New.
type Observer struct {
	acquire   *prometheus.HistogramVec
	attempts  *prometheus.CounterVec
	contended *prometheus.CounterVec
	renewals  *prometheus.CounterVec
	ends      *prometheus.CounterVec
	losses    *prometheus.CounterVec
	held      *prometheus.GaugeVec

	backends sync.Map // backend name → *series
}

// series are one backend's resolved children, so that Observe does no label lookup.
type series struct {
	acquired, notAcquired, acquireErr   prometheus.Observer
	attempts, contended                 prometheus.Counter
	renewOK, renewNotHeld, renewErr     prometheus.Counter
	released, expired, lost, closed, ot prometheus.Counter
	losses                              []prometheus.Counter // by dlock.Cause - 1
	held                                prometheus.Gauge
}

var _ dlock.Observer = (*Observer)(nil)

// New creates the metrics and registers them with reg (prometheus.DefaultRegisterer when
// reg is nil). It returns the registration error, e.g. a prometheus.AlreadyRegisteredError
// when another Observer with the same namespace and const labels is already registered
// with reg; nothing is left registered then.
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	c := config{namespace: "dlock", buckets: DefaultBuckets}
	for _, o := range opts {
		o(&c)
	}
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: name, Help: help, ConstLabels: c.labels}, labels)
	}
	o := &Observer{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: c.namespace,
			Name:        "acquire_duration_seconds",
			Help:        "Time spent in Acquire and TryAcquire calls, by outcome (acquired, not_acquired, error).",
			Buckets:     c.buckets,
			ConstLabels: c.labels}, []string{"backend", "outcome"}),
		attempts:  counter("acquire_attempts_total", "Requests to the backend made by Acquire and TryAcquire calls.", "backend"),
		contended: counter("acquire_contended_total", "Acquire and TryAcquire calls that found the lock held at least once.", "backend"),
		renewals:  counter("renewals_total", "Lease refreshes, explicit or automatic, by outcome (ok, not_held, error).", "backend", "outcome"),
		ends:      counter("lease_ends_total", "Leases that ended, by reason (released, expired, lost, closed, other).", "backend", "reason"),
		losses:    counter("lease_losses_total", "Leases that ended without their owner, by cause (expired, unreachable, refused, deleted, session_ended).", "backend", "cause"),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: "leases_held",
			Help: "Leases granted and not yet ended.", ConstLabels: c.labels}, []string{"backend"}),
	}
	var done []prometheus.Collector
	for _, col := range []prometheus.Collector{o.acquire, o.attempts, o.contended, o.renewals, o.ends, o.losses, o.held} {
		if err := reg.Register(col); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return nil, fmt.Errorf("dlockprom: register: %w", err)
		}
		done = append(done, col)
	}
	return o, nil
}

func (o *Observer) series(backend string) *series {
	if s, ok := o.backends.Load(backend); ok {
		return s.(*series)
	}
	s := &series{
		acquired:     o.acquire.WithLabelValues(backend, OutcomeAcquired),
		notAcquired:  o.acquire.WithLabelValues(backend, OutcomeNotAcquired),
		acquireErr:   o.acquire.WithLabelValues(backend, OutcomeError),
		attempts:     o.attempts.WithLabelValues(backend),
		contended:    o.contended.WithLabelValues(backend),
		renewOK:      o.renewals.WithLabelValues(backend, OutcomeOK),
		renewNotHeld: o.renewals.WithLabelValues(backend, OutcomeNotHeld),
		renewErr:     o.renewals.WithLabelValues(backend, OutcomeError),
		released:     o.ends.WithLabelValues(backend, ReasonReleased),
		expired:      o.ends.WithLabelValues(backend, ReasonExpired),
		lost:         o.ends.WithLabelValues(backend, ReasonLost),
		closed:       o.ends.WithLabelValues(backend, ReasonClosed),
		ot:           o.ends.WithLabelValues(backend, ReasonOther),
		held:         o.held.WithLabelValues(backend),
	}
	for _, c := range causes {
		s.losses = append(s.losses, o.losses.WithLabelValues(backend, c))
	}
	actual, _ := o.backends.LoadOrStore(backend, s)
	return actual.(*series)
}

// Observe updates the metrics for e. Events of an unknown Kind are ignored.
func (o *Observer) Observe(e dlock.Event) {
	s := o.series(e.Backend)
	switch e.Kind {
	case dlock.EventAcquire:
		h := s.acquireErr
		switch {
		case e.Err == nil:
			h = s.acquired
			s.held.Inc()
		case errors.Is(e.Err, dlock.ErrNotAcquired):
			h = s.notAcquired
		}
		h.Observe(e.Duration.Seconds())
		s.attempts.Add(float64(e.Attempts))
		if e.Contended {
			s.contended.Inc()
		}
	case dlock.EventRenew:
		switch {
		case e.Err == nil:
			s.renewOK.Inc()
		case errors.Is(e.Err, dlock.ErrNotHeld):
			s.renewNotHeld.Inc()
		default:
			s.renewErr.Inc()
		}
	case dlock.EventEnd:
		s.held.Dec()
		switch {
		case errors.Is(e.Err, dlock.ErrReleased):
			s.released.Inc()
		case errors.Is(e.Err, dlock.ErrExpired):
			s.expired.Inc()
		case errors.Is(e.Err, dlock.ErrLost):
			s.lost.Inc()
		case errors.Is(e.Err, dlock.ErrClosed):
			s.closed.Inc()
		default:
			s.ot.Inc()
		}
		if i := int(e.Cause) - 1; 0 <= i && i < len(s.losses) {
			s.losses[i].Inc()
		}
	}
}

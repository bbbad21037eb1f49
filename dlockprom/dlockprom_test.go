package dlockprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

// setup returns an observed Locker on a private memlock Store, the Store, and the
// registry holding the metrics.
func setup(t *testing.T) (dlock.Locker, *memlock.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := memlock.NewStore()
	l := dlock.Instrument(memlock.New(memlock.WithStore(store)), obs)
	t.Cleanup(func() { l.Close() })
	return l, store, reg
}

// value reads one series (metric name and label values in the order name=value…).
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func expect(t *testing.T, reg *prometheus.Registry, want float64, name string, labels ...string) {
	t.Helper()
	if got := value(t, reg, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func TestAcquireRelease(t *testing.T) {
	l, _, reg := setup(t)
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, reg, 1, "dlock_acquire_duration_seconds", "backend", "mem", "outcome", "acquired")
	expect(t, reg, 1, "dlock_acquire_attempts_total", "backend", "mem")
	expect(t, reg, 0, "dlock_acquire_contended_total", "backend", "mem")
	expect(t, reg, 1, "dlock_leases_held", "backend", "mem")
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, 0, "dlock_leases_held", "backend", "mem")
	expect(t, reg, 1, "dlock_lease_ends_total", "backend", "mem", "reason", "released")
	expect(t, reg, 0, "dlock_lease_ends_total", "backend", "mem", "reason", "lost")
}

func TestContention(t *testing.T) {
	l, _, reg := setup(t)
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "k", dlock.WithRetry(dlock.ConstantBackoff(5*time.Millisecond))); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held lock: %v", err)
	}
	expect(t, reg, 2, "dlock_acquire_duration_seconds", "backend", "mem", "outcome", "not_acquired")
	expect(t, reg, 2, "dlock_acquire_contended_total", "backend", "mem")
	if got := value(t, reg, "dlock_acquire_attempts_total", "backend", "mem"); got < 4 { // 1 + 1 + at least 2 while waiting
		t.Errorf("attempts = %v, want >= 4", got)
	}
	expect(t, reg, 1, "dlock_leases_held", "backend", "mem")
}

func TestRenewalsAndLoss(t *testing.T) {
	l, store, reg := setup(t)
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "k", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, 1, "dlock_renewals_total", "backend", "mem", "outcome", "ok")
	if !store.Delete("k") {
		t.Fatal("Delete found no lock")
	}
	if err := ls.Refresh(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after Delete: %v", err)
	}
	expect(t, reg, 1, "dlock_renewals_total", "backend", "mem", "outcome", "not_held")
	expect(t, reg, 0, "dlock_renewals_total", "backend", "mem", "outcome", "error")
	expect(t, reg, 1, "dlock_lease_ends_total", "backend", "mem", "reason", "lost")
	expect(t, reg, 1, "dlock_lease_losses_total", "backend", "mem", "cause", "refused")
	expect(t, reg, 0, "dlock_lease_losses_total", "backend", "mem", "cause", "expired")
	expect(t, reg, 0, "dlock_leases_held", "backend", "mem")
}

func TestAutoRenewLoss(t *testing.T) {
	l, store, reg := setup(t)
	ls, err := l.Acquire(context.Background(), "k", dlock.WithTTL(60*time.Millisecond), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	store.Delete("k")
	<-ls.Done()
	expect(t, reg, 1, "dlock_renewals_total", "backend", "mem", "outcome", "not_held")
	expect(t, reg, 1, "dlock_lease_ends_total", "backend", "mem", "reason", "lost")
	expect(t, reg, 0, "dlock_leases_held", "backend", "mem")
}

func TestExpiredAndClosed(t *testing.T) {
	l, _, reg := setup(t)
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "a", dlock.WithTTL(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-ls.Done()
	expect(t, reg, 1, "dlock_lease_ends_total", "backend", "mem", "reason", "expired")
	expect(t, reg, 1, "dlock_lease_losses_total", "backend", "mem", "cause", "expired")
	if _, err := l.Acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, 1, "dlock_leases_held", "backend", "mem")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, 1, "dlock_lease_ends_total", "backend", "mem", "reason", "closed")
	expect(t, reg, 0, "dlock_leases_held", "backend", "mem")
}

// TestErrorOutcome feeds events that memlock cannot produce (a failing store, an
// unknown end reason) straight to the Observer.
func TestErrorOutcome(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("connection refused")
	obs.Observe(dlock.Event{Kind: dlock.EventAcquire, Backend: "redis", Attempts: 1, Err: boom})
	obs.Observe(dlock.Event{Kind: dlock.EventRenew, Backend: "redis", Err: boom})
	obs.Observe(dlock.Event{Kind: dlock.EventEnd, Backend: "redis", Err: boom})
	expect(t, reg, 1, "dlock_acquire_duration_seconds", "backend", "redis", "outcome", "error")
	expect(t, reg, 0, "dlock_acquire_duration_seconds", "backend", "redis", "outcome", "acquired")
	expect(t, reg, 1, "dlock_renewals_total", "backend", "redis", "outcome", "error")
	expect(t, reg, 1, "dlock_lease_ends_total", "backend", "redis", "reason", "other")
}

// TestExposition pins the names, help texts and types a dashboard depends on.
func TestExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := dlockprom.New(reg, dlockprom.WithNamespace("app"), dlockprom.WithConstLabels(prometheus.Labels{"service": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	obs.Observe(dlock.Event{Kind: dlock.EventAcquire, Backend: "etcd", Attempts: 3, Contended: true})
	want := `
# HELP app_acquire_attempts_total Requests to the backend made by Acquire and TryAcquire calls.
# TYPE app_acquire_attempts_total counter
app_acquire_attempts_total{backend="etcd",service="x"} 3
# HELP app_acquire_contended_total Acquire and TryAcquire calls that found the lock held at least once.
# TYPE app_acquire_contended_total counter
app_acquire_contended_total{backend="etcd",service="x"} 1
# HELP app_leases_held Leases granted and not yet ended.
# TYPE app_leases_held gauge
app_leases_held{backend="etcd",service="x"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"app_acquire_attempts_total", "app_acquire_contended_total", "app_leases_held"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "app_renewals_total"); n != 3 {
		t.Errorf("app_renewals_total has %d series, want 3 (ok, not_held, error) once a backend is seen", n)
	}
	if n := testutil.CollectAndCount(reg, "app_lease_ends_total"); n != 5 {
		t.Errorf("app_lease_ends_total has %d series, want 5", n)
	}
	if n := testutil.CollectAndCount(reg, "app_lease_losses_total"); n != 5 {
		t.Errorf("app_lease_losses_total has %d series, want 5 (one per cause)", n)
	}
}

// TestLossCauses: each dlock.Cause is counted under its own label, and only there;
// a release or a close is no loss. (Real backends producing each cause:
// backends/all's TestLossCauses.)
func TestLossCauses(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[dlock.Cause]string{
		dlock.CauseExpired: "expired", dlock.CauseUnreachable: "unreachable", dlock.CauseRefused: "refused",
		dlock.CauseDeleted: "deleted", dlock.CauseSession: "session_ended",
	}
	obs.Observe(dlock.Event{Kind: dlock.EventEnd, Backend: "etcd", Err: dlock.ErrReleased})
	obs.Observe(dlock.Event{Kind: dlock.EventEnd, Backend: "etcd", Err: dlock.ErrClosed})
	for c := range labels {
		for range int(c) { // cause c is seen c times
			obs.Observe(dlock.Event{Kind: dlock.EventEnd, Backend: "etcd", Err: &dlock.LossError{Cause: c}, Cause: c})
		}
	}
	for c, label := range labels {
		expect(t, reg, float64(c), "dlock_lease_losses_total", "backend", "etcd", "cause", label)
	}
	expect(t, reg, float64(dlock.CauseExpired), "dlock_lease_ends_total", "backend", "etcd", "reason", "expired")
	lost := 0
	for c := range labels {
		if c != dlock.CauseExpired {
			lost += int(c)
		}
	}
	expect(t, reg, float64(lost), "dlock_lease_ends_total", "backend", "etcd", "reason", "lost")
}

func TestRegisterConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := dlockprom.New(reg); err != nil {
		t.Fatal(err)
	}
	_, err := dlockprom.New(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second New on one registry: %v, want AlreadyRegisteredError", err)
	}

	// A conflict on a later metric leaves none of the earlier ones registered.
	reg = prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "dlock_leases_held", Help: "taken"}))
	if _, err := dlockprom.New(reg); err == nil {
		t.Fatal("New succeeded over a taken name")
	}
	if _, err := dlockprom.New(reg, dlockprom.WithNamespace("other")); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "dlock_acquire") {
			t.Errorf("%s left registered by a failed New", mf.GetName())
		}
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	obs, err := dlockprom.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	events := []dlock.Event{
		{Kind: dlock.EventAcquire, Backend: "mem", Duration: time.Millisecond, Attempts: 1},
		{Kind: dlock.EventRenew, Backend: "mem"},
		{Kind: dlock.EventEnd, Backend: "mem", Err: dlock.ErrReleased},
		{Kind: dlock.EventEnd, Backend: "mem", Err: &dlock.LossError{Cause: dlock.CauseDeleted}, Cause: dlock.CauseDeleted},
	}
	obs.Observe(events[0]) // the first event of a backend resolves its series
	if n := testing.AllocsPerRun(100, func() {
		for _, e := range events {
			obs.Observe(e)
		}
	}); n != 0 {
		t.Errorf("Observe allocates %v times per %d events, want 0", n, len(events))
	}
}

// BenchmarkAcquireRelease compares an uncontended memlock cycle without an Observer,
// with one that does nothing, and with this package's Observer.
func BenchmarkAcquireRelease(b *testing.B) {
	obs, err := dlockprom.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		obs  dlock.Observer
	}{{"none", nil}, {"noop", dlock.ObserverFunc(func(dlock.Event) {})}, {"prometheus", obs}} {
		b.Run(bc.name, func(b *testing.B) {
			l := memlock.New(memlock.WithStore(memlock.NewStore()))
			defer l.Close()
			if bc.obs != nil {
				l = dlock.Instrument(l, bc.obs)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				ls, err := l.Acquire(ctx, "k")
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package bench

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/internal/servers"
)

// DefaultWaiters are the numbers of clients of the scaling measurement.
var DefaultWaiters = []int{8, 32, 100}

// ScalePoint is the contended measurement with Waiters clients on one key, and what
// the store served meanwhile.
type ScalePoint struct {
	Waiters      int
	Rate         float64 // grants per second
	TransferRate float64 // hand-offs per second: grants to another client than the previous holder
	// Requests is the number of requests the store's servers counted during the
	// measurement (Redis total_commands_processed, MySQL Questions, ZooKeeper's
	// received packets, etcd's gRPC messages received, PostgreSQL's transactions in
	// the run's database: pgTransactions), -1 where the store counts none (the
	// in-process backend). Everything the clients sent is in it: acquires,
	// releases, renewals, polls, watches.
	Requests int64
	// PerHandoff is Requests per hand-off (0 without either).
	PerHandoff float64
	// MaxOverMean is the longest wait over the mean wait.
	MaxOverMean float64
}

// Scaling is how a target's contended cost grows with the number of waiters.
type Scaling struct {
	// Points are those of the repetition whose Ratio is the median of Runs'.
	Points []ScalePoint
	// Runs are every repetition's points, in the order they ran (Config.Repeat).
	Runs [][]ScalePoint `json:",omitempty"`
}

// Ratio is the hand-off rate with the most waiters over the rate with the fewest
// (0 when either is missing): 1 when adding waiters costs nothing.
func (s *Scaling) Ratio() float64 {
	if s == nil {
		return 0
	}
	return rateRatio(s.Points)
}

// Growth is requests per hand-off with the most waiters over that with the fewest
// (0 when the store counts no requests): 1 when requests per hand-off stay flat, n/8
// for a herd that wakes every waiter on each release.
func (s *Scaling) Growth() float64 {
	if s == nil {
		return 0
	}
	return growth(s.Points)
}

// Ratios and Growths are Ratio and Growth in each repetition (Runs), in order; the
// Points' alone when there are no Runs.
func (s *Scaling) Ratios() []float64  { return s.each(rateRatio) }
func (s *Scaling) Growths() []float64 { return s.each(growth) }

func (s *Scaling) each(f func([]ScalePoint) float64) []float64 {
	runs := s.Runs
	if len(runs) == 0 {
		runs = [][]ScalePoint{s.Points}
	}
	var out []float64
	for _, r := range runs {
		if v := f(r); v > 0 {
			out = append(out, v)
		}
	}
	return out
}

func rateRatio(ps []ScalePoint) float64 {
	if len(ps) < 2 || ps[0].TransferRate == 0 {
		return 0
	}
	return ps[len(ps)-1].TransferRate / ps[0].TransferRate
}

func growth(ps []ScalePoint) float64 {
	if len(ps) < 2 || ps[0].PerHandoff == 0 {
		return 0
	}
	return ps[len(ps)-1].PerHandoff / ps[0].PerHandoff
}

// repeatScaling runs one repetition of a scaling measurement (run) reps times and
// keeps each (Runs), showing the one whose rate ratio is the median (Points). An
// error ends it with the repetitions so far.
func repeatScaling(reps int, run func() (*Scaling, error)) (*Scaling, error) {
	s := &Scaling{}
	for range max(reps, 1) {
		r, err := run()
		if r != nil && len(r.Points) > 0 {
			s.Runs = append(s.Runs, r.Points)
		}
		if err != nil {
			s.pickMedian()
			return s, err
		}
	}
	s.pickMedian()
	return s, nil
}

// pickMedian sets Points to the repetition whose rate ratio is the median (the
// lower middle one of an even number).
func (s *Scaling) pickMedian() {
	if len(s.Runs) == 0 {
		return
	}
	order := make([]int, len(s.Runs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rateRatio(s.Runs[a]), rateRatio(s.Runs[b])) })
	s.Points = s.Runs[order[(len(order)-1)/2]]
}

func (s *Scaling) String() string {
	var parts []string
	for _, p := range s.Points {
		per := "–"
		if p.PerHandoff > 0 {
			per = fmt.Sprintf("%.1f", p.PerHandoff)
		}
		parts = append(parts, fmt.Sprintf("%d waiters %.0f hand-offs/s, %s requests each", p.Waiters, p.TransferRate, per))
	}
	return strings.Join(parts, "; ")
}

// scaling runs the contended measurement of t with each number of waiters in turn,
// counting the store's requests around each.
func scaling(ctx context.Context, e *env, t Target, ttl time.Duration, waiters []int, d time.Duration) (*Scaling, error) {
	s := &Scaling{}
	for _, n := range waiters {
		before, cerr := e.requests(ctx, t.Store)
		c, err := contended(ctx, e.ep, t, ttl, n, d)
		if err != nil {
			return s, fmt.Errorf("%d waiters: %w", n, err)
		}
		p := ScalePoint{Waiters: n, Rate: c.Rate, TransferRate: c.TransferRate, Requests: -1, MaxOverMean: c.MaxOverMean()}
		if after, err := e.requests(ctx, t.Store); cerr == nil && err == nil && before >= 0 {
			p.Requests = after - before
			if c.Transfers > 0 {
				p.PerHandoff = float64(p.Requests) / float64(c.Transfers)
			}
		} else if cerr != nil || err != nil {
			return s, fmt.Errorf("counting %s's requests: %w", t.Store, firstErr(cerr, err))
		}
		s.Points = append(s.Points, p)
	}
	return s, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// requests is the number of requests the servers of store s have served so far
// (a counter: only differences mean something), or -1 for a store without servers.
func (e *env) requests(ctx context.Context, s Store) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sum := func(addrs []string, one func(string) (int64, error)) (int64, error) {
		var n int64
		for _, a := range addrs {
			v, err := one(a)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", a, err)
			}
			n += v
		}
		return n, nil
	}
	switch s {
	case Redis, Redis5:
		return sum(e.ep.addrs(s), func(a string) (int64, error) { return servers.RedisCommands(ctx, a) })
	case MySQL:
		return mysqlQuestions(ctx, e.ep.MySQL)
	case ZooKeeper:
		return sum(e.ep.ZooKeeper, func(a string) (int64, error) { return servers.ZooKeeperPackets(ctx, a) })
	case Etcd:
		return sum(e.ep.Etcd, func(a string) (int64, error) { return etcdMessages(ctx, a) })
	case Postgres:
		return pgTransactions(ctx, e.ep.Postgres)
	}
	return -1, nil
}

// mysqlQuestions is the server's Questions status variable: statements clients sent.
func mysqlQuestions(ctx context.Context, cfg *mysql.Config) (int64, error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return 0, err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var name string
	var n int64
	err = db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n)
	return n, err
}

// etcdMessages is the gRPC messages the etcd member received on every method
// (grpc_server_msg_received_total on its /metrics), stream messages included.
func etcdMessages(ctx context.Context, addr string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	var total float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		total += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("/metrics has no grpc_server_msg_received_total")
	}
	return int64(total), nil
}

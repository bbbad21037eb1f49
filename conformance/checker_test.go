package conformance

import (
	"os"
	"strings"
	"testing"
	"time"
)

// hb builds a history by hand: times are milliseconds after the trial's start.
type hb struct{ h *history }

func newHB() *hb { return &hb{h: &history{start: 1_000_000_000}} }

func (b *hb) ms(n int) int64 { return b.h.start + int64(n)*int64(time.Millisecond) }

// grant records client's acquisition of key (kind, limit) called at call, granted at
// ok with token, and returns the lease.
func (b *hb) grant(client, key, kind string, limit int, token uint64, call, ok int) int64 {
	seq := b.h.next()
	b.h.add(Event{T: b.ms(call), Seq: seq, Client: client, Op: OpAcquire, Phase: Call, Key: key, Kind: kind, Limit: limit})
	b.h.add(Event{T: b.ms(ok), Seq: seq, Client: client, Op: OpAcquire, Phase: OK, Key: key, Kind: kind, Limit: limit, Token: token})
	return seq
}

func (b *hb) release(client string, lease int64, at int) {
	seq := b.h.next()
	b.h.add(Event{T: b.ms(at), Seq: seq, Client: client, Op: OpRelease, Phase: Call, Lease: lease})
	b.h.add(Event{T: b.ms(at + 1), Seq: seq, Client: client, Op: OpRelease, Phase: OK, Lease: lease})
}

func (b *hb) end(client string, lease int64, at int, err string) {
	b.h.add(Event{T: b.ms(at), Client: client, Op: OpEnd, Lease: lease, Err: err})
}

func (b *hb) enter(holder string, token uint64, accepted bool, at int) {
	ph := OK
	if !accepted {
		ph = Fail
	}
	b.h.add(Event{T: b.ms(at), Client: holder, Op: OpEnter, Phase: ph, Token: token})
}

// guardEnter records a fencing guard's decision on holder's entry: called at call,
// answered at done (-1: never).
func (b *hb) guardEnter(guard, holder string, token uint64, accepted bool, call, done int) {
	seq := b.h.next()
	b.h.add(Event{T: b.ms(call), Seq: seq, Client: holder, Op: OpEnter, Phase: Call, Token: token, Resource: guard})
	if done < 0 {
		return
	}
	e := Event{T: b.ms(done), Seq: seq, Client: holder, Op: OpEnter, Phase: OK, Token: token, Resource: guard}
	if !accepted {
		e.Phase, e.Err = Fail, "stale"
	}
	b.h.add(e)
}

func (b *hb) leave(holder string, at int) {
	b.h.add(Event{T: b.ms(at), Client: holder, Op: OpLeave})
}

func (b *hb) fault(what string, from, to int) {
	seq := b.h.next()
	b.h.add(Event{T: b.ms(from), Seq: seq, Op: OpFault, Phase: Call, Note: what})
	b.h.add(Event{T: b.ms(to), Seq: seq, Op: OpFault, Phase: OK, Note: what})
}

// TestChecker shows each check of the checker deciding hand-made histories both
// ways: what must be accepted is, and what must be rejected is, with evidence.
func TestChecker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *hb)
		c     claims
		bad   string // a word the evidence must contain; "" for a history that holds
	}{
		{"mutex in turn", func(b *hb) {
			l := b.grant("a", "k", "", 0, 1, 0, 1)
			b.release("a", l, 10)
			l = b.grant("b", "k", "", 0, 2, 5, 10) // granted the moment a's release was called
			b.end("b", l, 20, "")
		}, claims{exclusion: true, fencing: true}, ""},
		{"mutex overlap", func(b *hb) {
			b.grant("a", "k", "", 0, 1, 0, 1)
			b.grant("b", "k", "", 0, 2, 5, 10)
		}, claims{exclusion: true}, "still believed"},
		{"a lease that ended by Done frees its key", func(b *hb) {
			l := b.grant("a", "k", "", 0, 1, 0, 1)
			b.end("a", l, 8, "dlock: lease lost")
			b.grant("b", "k", "", 0, 2, 5, 10)
		}, claims{exclusion: true}, ""},
		{"a killed holder counts as held until its validity", func(b *hb) {
			b.grant("child", "k", "", 0, 1, 0, 1)
			b.grant("b", "k", "", 0, 2, 5, 10)
		}, claims{exclusion: true, heldUntil: map[string]int64{"child": 1_000_000_000 + 50*int64(time.Millisecond)}}, "validity"},
		{"two keys are two locks", func(b *hb) {
			b.grant("a", "k1", "", 0, 1, 0, 1)
			b.grant("b", "k2", "", 0, 1, 0, 1)
		}, claims{exclusion: true}, ""},
		{"semaphore within its limit", func(b *hb) {
			b.grant("a", "s", "permit", 2, 1, 0, 1)
			b.grant("b", "s", "permit", 2, 2, 0, 2)
		}, claims{exclusion: true}, ""},
		{"semaphore past its limit", func(b *hb) {
			b.grant("a", "s", "permit", 2, 1, 0, 1)
			b.grant("b", "s", "permit", 2, 2, 0, 2)
			b.grant("c", "s", "permit", 2, 3, 0, 3)
		}, claims{exclusion: true}, "still believed"},
		{"readers together", func(b *hb) {
			b.grant("a", "rw", "shared", 0, 1, 0, 1)
			b.grant("b", "rw", "shared", 0, 1, 0, 2)
		}, claims{exclusion: true}, ""},
		{"a writer among readers", func(b *hb) {
			b.grant("a", "rw", "shared", 0, 1, 0, 1)
			b.grant("w", "rw", "exclusive", 0, 2, 0, 2)
		}, claims{exclusion: true}, "still believed"},
		{"a set holds each of its keys", func(b *hb) {
			seq := b.h.next()
			b.h.add(Event{T: b.ms(0), Seq: seq, Client: "a", Op: OpAcquire, Phase: Call, Kind: "set", Keys: []string{"x", "y"}})
			b.h.add(Event{T: b.ms(1), Seq: seq, Client: "a", Op: OpAcquire, Phase: OK, Kind: "set", Keys: []string{"x", "y"}, Token: 1})
			b.grant("b", "y", "", 0, 2, 2, 3)
		}, claims{exclusion: true}, "still believed"},
		{"tokens of concurrent acquisitions in either order", func(b *hb) {
			l := b.grant("a", "k", "", 0, 2, 0, 5)
			b.release("a", l, 6)
			b.grant("b", "k", "", 0, 1, 1, 10) // called before a's grant returned: may have come first
		}, claims{fencing: true}, ""},
		{"a later grant with a smaller token", func(b *hb) {
			l := b.grant("a", "k", "", 0, 5, 0, 1)
			b.release("a", l, 2)
			b.grant("b", "k", "", 0, 4, 3, 4)
		}, claims{fencing: true}, "token 4"},
		{"a token handed out twice", func(b *hb) {
			l := b.grant("a", "k", "", 0, 7, 0, 1)
			b.release("a", l, 2)
			b.fault("failover", 3, 4)
			b.grant("b", "k", "", 0, 7, 5, 6)
		}, claims{fencing: true}, "token 7"},
		{"tokens without fencing", func(b *hb) { b.grant("a", "k", "", 0, 3, 0, 1) }, claims{zeroTokens: true}, "not 0"},
		{"the resource: in turn, a stale write refused", func(b *hb) {
			b.enter("new", 5, true, 0)
			b.enter("old", 4, false, 1)
			b.leave("new", 2)
		}, claims{resource: true, recipe: true}, ""},
		{"the resource: two inside", func(b *hb) {
			b.enter("new", 5, true, 0)
			b.enter("old", 4, true, 1)
		}, claims{resource: true}, "inside"},
		{"the resource accepted a stale token", func(b *hb) {
			b.enter("new", 5, true, 0)
			b.leave("new", 1)
			b.enter("old", 4, true, 2)
		}, claims{recipe: true}, "fencing rule"},
		{"the resource refused a fresh token", func(b *hb) {
			b.enter("a", 5, true, 0)
			b.leave("a", 1)
			b.enter("b", 6, false, 2)
		}, claims{recipe: true}, "fencing rule"},
		{"an equal token from another grant", func(b *hb) {
			b.enter("a", 5, true, 0)
			b.leave("a", 1)
			b.enter("b", 5, true, 2)
		}, claims{recipe: true}, "fencing rule"},
		{"a guard's decisions are checked apart from the suite's resource", func(b *hb) {
			b.enter("new", 5, true, 0)
			b.guardEnter("g", "new", 5, true, 0, 1)
			b.enter("old", 4, false, 2)
			b.guardEnter("g", "old", 4, true, 2, 3)
		}, claims{recipe: true, guard: "g"}, "fencing rule"},
		{"the suite's resource is judged without the guard's decisions", func(b *hb) {
			b.enter("new", 5, true, 0)
			b.guardEnter("g", "new", 5, true, 0, 1)
			b.enter("old", 4, false, 2)
			b.guardEnter("g", "old", 4, true, 2, 3)
			b.leave("new", 4)
		}, claims{resource: true, recipe: true}, ""},
		{"a guard decides between its call and its answer", func(b *hb) {
			// Read at its answers, token 5 was accepted before 4 was; but 4's call
			// came before 5's answer, and its store may have decided it first.
			b.guardEnter("g", "new", 5, true, 0, 3)
			b.guardEnter("g", "old", 4, true, 1, 6)
		}, claims{recipe: true, guard: "g"}, ""},
		{"a guard that refused a fresh token", func(b *hb) {
			b.guardEnter("g", "a", 5, true, 0, 1)
			b.guardEnter("g", "b", 6, false, 2, 3)
		}, claims{recipe: true, guard: "g"}, "fencing rule"},
		{"a guard that never answered decided nothing", func(b *hb) {
			b.guardEnter("g", "a", 5, true, 0, 1)
			b.guardEnter("g", "b", 6, false, 2, -1)
		}, claims{recipe: true, guard: "g"}, ""},
		{"two inside a guarded resource", func(b *hb) {
			b.guardEnter("g", "a", 5, true, 0, 1)
			b.guardEnter("g", "b", 6, true, 2, 3)
		}, claims{resource: true, guard: "g"}, "inside"},
		{"liveness met", func(b *hb) {
			b.fault("kill", 0, 1)
			b.grant("b", "k", "", 0, 1, 2, 30)
		}, claims{liveness: []liveness{{key: "k", not: "child", after: 1_000_000_000, within: 50 * time.Millisecond, what: "freed"}}}, ""},
		{"liveness missed", func(b *hb) {
			b.fault("kill", 0, 1)
			b.grant("b", "k", "", 0, 1, 2, 300)
		}, claims{liveness: []liveness{{key: "k", not: "child", after: 1_000_000_000, within: 50 * time.Millisecond, what: "freed"}}}, "no grant"},
		{"a bound kept and one not", func(b *hb) {
			l := b.grant("a", "k", "", 0, 1, 0, 1)
			seq := b.h.next()
			b.h.add(Event{T: b.ms(5), Seq: seq, Client: "a", Op: OpRelease, Phase: Call, Lease: l})
			b.h.add(Event{T: b.ms(900), Seq: seq, Client: "a", Op: OpRelease, Phase: Fail, Lease: l, Err: "timeout"})
		}, claims{bounds: []bound{{op: OpRelease, within: 200 * time.Millisecond, what: "Release under a hang"}}}, "took"},
		{"losses with the causes allowed", func(b *hb) {
			l := b.grant("cut-off", "k", "", 0, 1, 0, 1)
			b.h.add(Event{T: b.ms(20), Client: "cut-off", Op: OpEnd, Key: "k", Lease: l, Err: "dlock: lease lost: unreachable", Cause: "unreachable"})
			m := b.grant("other", "k", "", 0, 2, 30, 31)
			b.h.add(Event{T: b.ms(40), Client: "other", Op: OpEnd, Key: "k", Lease: m, Err: "dlock: lease lost: refused", Cause: "refused"})
			n := b.grant("cut-off", "k", "", 0, 3, 50, 51)
			b.h.add(Event{T: b.ms(60), Client: "cut-off", Op: OpEnd, Key: "k", Lease: n, Err: "dlock: closed"})
		}, claims{causes: []causes{{client: "cut-off", want: []string{"unreachable"}, what: "cut off"}}}, ""},
		{"a loss with a cause not allowed", func(b *hb) {
			l := b.grant("cut-off", "k", "", 0, 1, 0, 1)
			b.h.add(Event{T: b.ms(20), Client: "cut-off", Op: OpEnd, Key: "k", Lease: l, Err: "dlock: lease lost: session ended", Cause: "session ended"})
		}, claims{causes: []causes{{client: "cut-off", want: []string{"unreachable"}, what: "cut off"}}}, "want unreachable"},
		{"an expectation that failed", func(b *hb) {
			b.h.add(Event{T: b.ms(1), Op: OpExpect, Phase: Fail, Note: "ErrInvalidKey expected"})
		}, claims{}, "ErrInvalidKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			tc.build(b)
			dir := t.TempDir()
			o := check(b.h, tc.c, dir, "trial")
			violated := o.violated() // a wrong cause is no violation: reported apart
			o.evidence = append(o.evidence, o.wrongCauses...)
			if !o.exercised {
				t.Fatalf("not exercised: %s", o.why)
			}
			switch {
			case tc.bad == "" && o.violated():
				t.Errorf("want held, got violations: %v", o.evidence)
			case tc.bad != "" && !o.violated():
				t.Errorf("want a violation (%q), got none", tc.bad)
			case tc.bad != "" && !strings.Contains(strings.Join(o.evidence, "\n"), tc.bad):
				t.Errorf("evidence %q does not mention %q", o.evidence, tc.bad)
			}
			for _, p := range o.viz {
				if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
					t.Errorf("visualization %s: %v", p, err)
				}
			}
			// Every violated trial gets porcupine's visualization: of the model that
			// rejected it, or, for a violation no model rejects (a bound, a liveness
			// claim, an expectation), of its holds with the violation on the time line.
			if violated && len(o.viz) == 0 {
				t.Errorf("a violated trial has no visualization")
			}
			if !violated && len(o.viz) > 0 {
				t.Errorf("a trial that held has visualizations %v", o.viz)
			}
			for _, p := range o.viz {
				if !strings.HasSuffix(p, "-violation.html") {
					continue
				}
				body, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if ev := o.evidence[0]; !strings.Contains(string(body), "violated") || !strings.Contains(string(body), strings.Fields(ev)[0]) {
					t.Errorf("the violation's visualization does not show its evidence %q", ev)
				}
			}
		})
	}
}

// A trial whose fault did not take effect is not exercised, whatever else it shows.
func TestCheckerNotExercised(t *testing.T) {
	b := newHB()
	b.fault("failover", 0, 1)
	b.grant("b", "k", "", 0, 1, 2, 3)
	o := check(b.h, claims{exclusion: true, exercised: func(v *view) (bool, string) {
		if len(v.grants("k")) < 2 {
			return false, "no grant before the failover"
		}
		return true, ""
	}}, "", "")
	if o.exercised || o.why != "no grant before the failover" {
		t.Errorf("exercised %v (%q), want not exercised with the reason", o.exercised, o.why)
	}
	if o.violated() {
		t.Errorf("violations %v", o.evidence)
	}
}

package conformance

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlock-go/dlock/internal/results"
)

// The checker decides a trial from its history alone. What a trial claims — which
// properties the property or scenario under test promises, and what must have
// happened for the trial to count — comes in claims; the verdict is the same code for
// every property, scenario, primitive, backend and peer.
//
// Exclusion, fencing and the protected resource are each checked by porcupine
// (github.com/anishathalye/porcupine) against a sequential model: a history is
// accepted when its operations can be ordered, each at a point between its call and
// its return, so that the model allows every step. A rejected history gets
// porcupine's visualization, written beside the history.

// claims is what one trial promises.
type claims struct {
	// exclusion: the intervals in which clients believed they held a key (grant …
	// Release called, Done, or the client killed) never exceed what the key allows:
	// one holder of a mutex, limit permits of a semaphore, a writer alone.
	exclusion bool
	// resource: the protected resource's critical sections (accepted entries … their
	// leave) never overlapped beyond what it allows.
	resource bool
	// recipe: a fenced resource accepted exactly what docs/fencing.md's rule allows.
	recipe bool
	// guard: the resource whose decisions resource and recipe are about: "" the
	// suite's own, else a fencing guard's name (Event.Resource).
	guard string
	// fencing: per key, the tokens of grants increase in real-time order; zeroTokens:
	// every token is 0 (a backend without fencing).
	fencing, zeroTokens bool
	// heldUntil extends the holds of a client past its recorded end, up to a time (a
	// killed holder that, for the others, might as well be paused until its validity
	// ends).
	heldUntil map[string]int64
	// kept: keys whose leases must end only by their holder's Release (a lease held
	// across a fault is kept).
	kept []string
	// liveness: each must be met.
	liveness []liveness
	// bounds: operations that must complete within a duration of their call.
	bounds []bound
	// lasts: leases of a key that must end (Done, or Release called) within a
	// duration of their grant.
	lasts []lasts
	// causes: the leases they name that ended in a loss name one of the causes
	// allowed (Event.Cause). A wrong cause is no violation of the cell's property
	// (exclusion, a bound): it is reported apart (outcome.wrongCauses), and fails the
	// test.
	causes []causes
	// exercised says whether the trial did what it set out to (the fault took effect
	// while it mattered) and, if not, why. nil: every trial counts.
	exercised func(v *view) (bool, string)
}

// liveness: a grant of key to a client other than not must come within within after
// the time after (what says what it is about).
type liveness struct {
	key    string
	not    string
	after  int64
	within time.Duration
	what   string
}

// bound: op by client ("" any) must return within within of its call.
type bound struct {
	client string
	op     Op
	within time.Duration
	what   string
}

// lasts: every lease of key must end — its Done close — within within of its grant
// (whatever its holder did meanwhile: a Release that hangs does not end it).
type lasts struct {
	key    string
	within time.Duration
	what   string
}

// causes: every lease of key ("" any) held by client ("" any) that ended in a
// loss must name one of want (dlock.Cause's names, as Event.Cause records them).
type causes struct {
	key, client string
	want        []string
	what        string
}

// outcome is a trial's verdict.
type outcome struct {
	exercised bool
	why       string   // why the trial did not count
	evidence  []string // one line per violation found
	viz       []string // visualizations written (paths)
	// wrongCauses: one line per lease lost with a cause claims.causes does not allow.
	wrongCauses []string
}

func (o outcome) violated() bool { return len(o.evidence) > 0 }

// hold is an interval in which a client believed it held key.
type hold struct {
	client     string
	lease      int64
	key        string
	kind       string // "" mutex, permit, shared, exclusive, term
	limit      int
	token      uint64
	call       int64 // the acquisition's call
	start, end int64 // grant … release called, Done, killed (math.MaxInt64: still held at the end)
	endWhy     string
}

// view is a history seen as holds, grants, resource operations and faults.
type view struct {
	events []Event
	start  int64 // the trial's start
	holds  []hold
	faults []fault
}

type fault struct {
	what       string
	start, end int64
}

// newView derives holds and faults from a history's events (in time order).
func newView(events []Event, start int64, heldUntil map[string]int64) *view {
	v := &view{events: events, start: start}
	calls := map[int64]Event{}
	open := map[int64][]int{} // lease → its holds (a set has one per key), while open
	closeHold := func(lease int64, at int64, why string) {
		for _, i := range open[lease] {
			v.holds[i].end, v.holds[i].endWhy = at, why
		}
		delete(open, lease)
	}
	for _, e := range events {
		switch {
		case e.Phase == Call:
			calls[e.Seq] = e
			switch e.Op {
			case OpRelease:
				closeHold(e.Lease, e.T, "Release called")
			case OpFault:
				v.faults = append(v.faults, fault{what: e.Note, start: e.T, end: math.MaxInt64})
			}
		case e.Phase == OK && (e.Op == OpAcquire || e.Op == OpTry):
			call := e.T
			if c, ok := calls[e.Seq]; ok {
				call = c.T
			}
			keys, kind := []string{e.Key}, e.Kind
			if kind == "set" {
				keys, kind = e.Keys, "exclusive"
			}
			for _, k := range keys {
				open[e.Seq] = append(open[e.Seq], len(v.holds))
				v.holds = append(v.holds, hold{client: e.Client, lease: e.Seq, key: k, kind: kind, limit: e.Limit,
					token: e.Token, call: call, start: e.T, end: math.MaxInt64})
			}
		case e.Phase == OK && e.Op == OpFault:
			for i := len(v.faults) - 1; i >= 0; i-- {
				if v.faults[i].what == e.Note && v.faults[i].end == math.MaxInt64 {
					v.faults[i].end = e.T
					break
				}
			}
		case e.Op == OpEnd:
			why := "Done"
			if e.Err != "" {
				why = "Done: " + e.Err
			}
			closeHold(e.Lease, e.T, why)
		}
	}
	for i := range v.holds {
		h := &v.holds[i]
		if until, ok := heldUntil[h.client]; ok && (h.end == math.MaxInt64 || until > h.end) {
			h.end, h.endWhy = until, "its validity would have ended (the holder was killed)"
		}
	}
	return v
}

// at formats a time of the trial.
func (v *view) at(t int64) string {
	if t == math.MaxInt64 {
		return "the end"
	}
	return time.Duration(t - v.start).Round(time.Microsecond).String()
}

// heldAt reports whether a hold of key by client ("" anyone) was live at t.
func (v *view) heldAt(key, client string, t int64) bool {
	for _, h := range v.holds {
		if h.key == key && (client == "" || h.client == client) && h.start <= t && t < h.end {
			return true
		}
	}
	return false
}

// faultNamed returns the first fault whose description starts with prefix.
func (v *view) faultNamed(prefix string) (fault, bool) {
	for _, f := range v.faults {
		if strings.HasPrefix(f.what, prefix) {
			return f, true
		}
	}
	return fault{}, false
}

// grants returns the grants of key, in the order they completed.
func (v *view) grants(key string) []hold {
	var out []hold
	for _, h := range v.holds {
		if h.key == key {
			out = append(out, h)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// check decides a trial. dir, if not empty, is where visualizations of rejected
// histories go, named after name.
func check(h *history, c claims, dir, name string) (o outcome) {
	events, dropped := h.snapshot()
	v := newView(events, h.start, c.heldUntil)
	if dropped > 0 {
		o.evidence = append(o.evidence, fmt.Sprintf("the history lost %d events past its bound of %d: not decidable", dropped, maxEvents))
		return o
	}
	o.exercised = true
	if c.exercised != nil {
		o.exercised, o.why = c.exercised(v)
	}
	viz := func(kind string, m porcupine.Model, ops []porcupine.Operation) bool {
		res, info := porcupine.CheckOperationsVerbose(m, ops, time.Minute)
		if res == porcupine.Ok {
			return true
		}
		if dir != "" {
			path := filepath.Join(dir, results.FileSafe(name+"-"+kind)+".html")
			info.AddAnnotations(faultAnnotations(v))
			if err := os.MkdirAll(dir, 0o755); err == nil && porcupine.VisualizePath(m, info, path) == nil {
				o.viz = append(o.viz, path)
			}
		}
		return res == porcupine.Unknown // undecided within the time: not evidence of a violation
	}
	if c.exclusion {
		if ops := holdOps(v); !viz("holds", holdsModel, ops) {
			o.evidence = append(o.evidence, overlaps(v)...)
			if len(o.evidence) == 0 {
				o.evidence = append(o.evidence, "porcupine found no order of the grants and ends that keeps every key within its limit")
			}
		}
	}
	if c.fencing {
		if ops := tokenOps(v); !viz("tokens", tokenModel, ops) {
			o.evidence = append(o.evidence, tokenDisorder(v)...)
		}
	}
	if c.zeroTokens {
		for _, h := range v.holds {
			if h.token != 0 {
				o.evidence = append(o.evidence, fmt.Sprintf("%s was granted %s with token %d, not 0 (the backend does not fence)", h.client, h.key, h.token))
				break
			}
		}
	}
	if c.resource || c.recipe {
		ops, refusedOps := resourceOps(v, c.guard)
		if c.resource && !viz("resource", resourceModel, ops) {
			o.evidence = append(o.evidence, resourceOverlaps(v, c.guard)...)
		}
		if c.recipe && !viz("fencing-rule", recipeModel, refusedOps) {
			o.evidence = append(o.evidence, "the fenced resource accepted or refused a write against the fencing rule (see its visualization)")
		}
	}
	for _, k := range c.kept {
		for _, h := range v.grants(k) {
			if h.end != math.MaxInt64 && h.endWhy != "Release called" {
				o.evidence = append(o.evidence, fmt.Sprintf("%s's lease of %s (granted at %s) ended at %s: %s", h.client, k, v.at(h.start), v.at(h.end), h.endWhy))
			}
		}
	}
	for _, l := range c.liveness {
		if !v.grantedWithin(l) {
			o.evidence = append(o.evidence, fmt.Sprintf("%s: no grant of %s within %v after %s", l.what, l.key, l.within, v.at(l.after)))
		}
	}
	for _, b := range c.bounds {
		o.evidence = append(o.evidence, v.overBound(b)...)
	}
	for _, l := range c.lasts {
		o.evidence = append(o.evidence, v.lateEnds(l)...)
	}
	for _, cs := range c.causes {
		o.wrongCauses = append(o.wrongCauses, v.wrongCauses(cs)...)
	}
	for _, e := range events { // the checks' own evidence first, then what the property's code saw
		if e.Op == OpExpect && e.Phase == Fail {
			o.evidence = append(o.evidence, e.Note)
		}
	}
	if o.violated() && len(o.viz) == 0 && dir != "" {
		// A violation no model rejected (a liveness or time bound missed, a wrong
		// answer the property saw): the holds as porcupine orders them, with the
		// failed calls and the violation itself on the time line.
		_, info := porcupine.CheckOperationsVerbose(holdsModel, holdOps(v), time.Minute)
		info.AddAnnotations(faultAnnotations(v))
		info.AddAnnotations(violationAnnotations(v, o.evidence))
		path := filepath.Join(dir, results.FileSafe(name+"-violation")+".html")
		if err := os.MkdirAll(dir, 0o755); err == nil && porcupine.VisualizePath(holdsModel, info, path) == nil {
			o.viz = append(o.viz, path)
		}
	}
	return o
}

// maxFailedAnnotations bounds the failed calls a violation's visualization shows.
const maxFailedAnnotations = 2000

// clientIDs numbers the clients of the view's history for porcupine, so that a
// visualization's operations and annotations share their rows.
func (v *view) clientIDs() map[string]int {
	var names []string
	for _, e := range v.events {
		if e.Client != "" {
			names = append(names, e.Client)
		}
	}
	for _, h := range v.holds {
		names = append(names, h.client)
	}
	return clientIDs(names)
}

// violationAnnotations puts on a visualization's time line what a holds model does
// not show: each call that failed (with its error, on its client's row), each check
// the property's code saw fail, and the violation's evidence.
func violationAnnotations(v *view, evidence []string) []porcupine.Annotation {
	ids := v.clientIDs()
	calls := map[int64]int64{}
	failed := 0
	var out []porcupine.Annotation
	end := v.start
	for _, e := range v.events {
		end = max(end, e.T)
		switch {
		case e.Phase == Call:
			calls[e.Seq] = e.T
		case e.Op == OpExpect && e.Phase == Fail:
			out = append(out, porcupine.Annotation{Tag: "violation", Start: e.T - v.start, Description: "check failed: " + shorten(e.Note), Details: e.Note, BackgroundColor: "#f08080"})
		case e.Phase == Fail && e.Client != "" && failed < maxFailedAnnotations:
			failed++
			start := e.T
			if c, ok := calls[e.Seq]; ok {
				start = c
			}
			out = append(out, porcupine.Annotation{ClientId: ids[e.Client], Start: start - v.start, End: e.T - v.start,
				Description: fmt.Sprintf("%s %s failed", e.Op, e.Key), Details: e.Err, BackgroundColor: "#fde2a7"})
		}
	}
	for _, ev := range evidence {
		out = append(out, porcupine.Annotation{Tag: "violation", Start: 0, End: end - v.start, Description: "violated: " + shorten(ev), Details: ev, BackgroundColor: "#f08080"})
	}
	return out
}

// shorten cuts a line of evidence for a label (the tooltip shows it whole).
func shorten(s string) string {
	if r := []rune(s); len(r) > 120 {
		return string(r[:117]) + "..."
	}
	return s
}

// faultAnnotations shows the faults on a visualization's time line.
func faultAnnotations(v *view) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, f := range v.faults {
		end := f.end
		if end == math.MaxInt64 {
			end = f.start
		}
		out = append(out, porcupine.Annotation{Tag: "faults", Start: f.start - v.start, End: end - v.start, Description: f.what, BackgroundColor: "#f9c0c0"})
	}
	return out
}

// clientIDs numbers the clients of a history for porcupine (zero-based, stable).
func clientIDs(names []string) map[string]int {
	slices.Sort(names)
	names = slices.Compact(names)
	ids := make(map[string]int, len(names))
	for i, n := range names {
		ids[n] = i
	}
	return ids
}

// byKey partitions a history by the key of each operation's input: keys are
// independent, and porcupine checks each on its own.
func byKey(key func(input any) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range ops {
			k := key(op.Input)
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			out = append(out, by[k])
		}
		return out
	}
}

// The holds model: per key, the leases inside. A grant is a step that enters (call
// and return at its grant: the belief starts there), an end one that leaves.
type holdInput struct {
	key   string
	lease int64
	kind  string
	limit int
	enter bool
	desc  string
}

// holdState is the sorted leases inside one key, with their kinds ("L:k").
type holdState string

var holdsModel = porcupine.Model{
	Partition: byKey(func(in any) string { return in.(holdInput).key }),
	Init:      func() any { return holdState("") },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(holdInput)
		inside := parseHoldState(state.(holdState))
		if !in.enter {
			delete(inside, in.lease)
			return true, formatHoldState(inside)
		}
		if !admits(inside, in.kind, in.limit) {
			return false, state
		}
		inside[in.lease] = in.kind
		return true, formatHoldState(inside)
	},
	DescribeOperation: func(input, _ any) string { return input.(holdInput).desc },
	DescribeState: func(state any) string {
		if state.(holdState) == "" {
			return "free"
		}
		return "held by " + string(state.(holdState))
	},
}

// admits reports whether a holder of kind may join those inside (limit: a semaphore's).
func admits(inside map[int64]string, kind string, limit int) bool {
	switch kind {
	case "permit":
		return len(inside) < max(limit, 1)
	case "shared":
		for _, k := range inside {
			if k != "shared" {
				return false
			}
		}
		return true
	}
	return len(inside) == 0 // the mutex, a writer, a leader
}

func parseHoldState(s holdState) map[int64]string {
	m := map[int64]string{}
	if s == "" {
		return m
	}
	for _, part := range strings.Split(string(s), ",") {
		var l int64
		var k string
		fmt.Sscanf(part, "%d:%s", &l, &k)
		if k == "-" {
			k = ""
		}
		m[l] = k
	}
	return m
}

func formatHoldState(m map[int64]string) holdState {
	ls := make([]int64, 0, len(m))
	for l := range m {
		ls = append(ls, l)
	}
	slices.Sort(ls)
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		k := m[l]
		if k == "" {
			k = "-"
		}
		parts = append(parts, fmt.Sprintf("%d:%s", l, k))
	}
	return holdState(strings.Join(parts, ","))
}

func holdOps(v *view) []porcupine.Operation {
	ids := v.clientIDs()
	var ops []porcupine.Operation
	for _, h := range v.holds {
		what := h.kind
		if what == "" {
			what = "lock"
		}
		ops = append(ops, porcupine.Operation{ClientId: ids[h.client], Call: h.start - v.start, Return: h.start - v.start,
			Input: holdInput{key: h.key, lease: h.lease, kind: h.kind, limit: h.limit, enter: true,
				desc: fmt.Sprintf("%s granted %s %s (lease %d, token %d)", h.client, what, h.key, h.lease, h.token)}})
		if h.end != math.MaxInt64 {
			ops = append(ops, porcupine.Operation{ClientId: ids[h.client], Call: h.end - v.start, Return: h.end - v.start,
				Input: holdInput{key: h.key, lease: h.lease, enter: false,
					desc: fmt.Sprintf("%s no longer holds %s (lease %d): %s", h.client, h.key, h.lease, h.endWhy)}})
		}
	}
	return ops
}

// overlaps names the holds that overlapped beyond their key's limit (the evidence
// of a rejected holds history).
func overlaps(v *view) []string {
	var out []string
	byKey := map[string][]hold{}
	for _, h := range v.holds {
		byKey[h.key] = append(byKey[h.key], h)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		hs := byKey[k]
		sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
		for i, h := range hs {
			inside := map[int64]string{}
			var with []string
			for _, o := range hs[:i] {
				if o.start <= h.start && h.start < o.end {
					inside[o.lease] = o.kind
					until := "still held when the trial ended"
					if o.end != math.MaxInt64 {
						until = fmt.Sprintf("until %s: %s", v.at(o.end), o.endWhy)
					}
					with = append(with, fmt.Sprintf("%s (token %d, granted at %s, %s)", o.client, o.token, v.at(o.start), until))
				}
			}
			if !admits(inside, h.kind, h.limit) {
				out = append(out, fmt.Sprintf("%s was granted %s (token %d) at %s while %s still believed it held it",
					h.client, k, h.token, v.at(h.start), strings.Join(with, ", ")))
				if len(out) >= 3 {
					return out
				}
			}
		}
	}
	return out
}

// The tokens model: per key, the largest token granted so far; each grant must get a
// larger one. A grant's call and return are the acquisition's.
type tokenInput struct {
	key   string
	token uint64
	desc  string
}

var tokenModel = porcupine.Model{
	Partition: byKey(func(in any) string { return in.(tokenInput).key }),
	Init:      func() any { return uint64(0) },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(tokenInput)
		if in.token <= state.(uint64) {
			return false, state
		}
		return true, in.token
	},
	DescribeOperation: func(input, _ any) string { return input.(tokenInput).desc },
	DescribeState:     func(state any) string { return fmt.Sprintf("last token %d", state.(uint64)) },
}

func tokenOps(v *view) []porcupine.Operation {
	var names []string
	for _, h := range v.holds {
		names = append(names, h.client)
	}
	ids := clientIDs(names)
	var ops []porcupine.Operation
	seen := map[int64]bool{}
	for _, h := range v.holds {
		if seen[h.lease] || h.kind == "shared" {
			continue // a set's parts share one grant; shared grants may share a token
		}
		seen[h.lease] = true
		ops = append(ops, porcupine.Operation{ClientId: ids[h.client], Call: h.call - v.start, Return: h.start - v.start,
			Input: tokenInput{key: h.key, token: h.token, desc: fmt.Sprintf("%s granted %s, token %d", h.client, h.key, h.token)}})
	}
	return ops
}

// tokenDisorder names grants that came after another completed without a larger token.
func tokenDisorder(v *view) []string {
	var out []string
	for _, h := range v.holds {
		for _, o := range v.holds {
			if o.key == h.key && o.lease != h.lease && o.start < h.call && h.token <= o.token && h.kind != "shared" {
				out = append(out, fmt.Sprintf("%s was granted %s with token %d at %s, after %s's grant with token %d had completed (at %s)",
					h.client, h.key, h.token, v.at(h.start), o.client, o.token, v.at(o.start)))
				if len(out) >= 3 {
					return out
				}
			}
		}
	}
	if len(out) == 0 {
		out = append(out, "porcupine found no order of the grants in which every token is larger than the one before")
	}
	return out
}

// The resource models. An entry (accepted or refused by a fenced resource) and a
// leave are points on the resource's own clock, which decides them under its lock;
// a fencing guard's entry is decided by its store at some point between its call
// and its completion.
type resInput struct {
	holder    string
	enter     bool
	exclusive bool
	limit     int
	token     uint64
	accepted  bool
	desc      string
}

var resourceModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(resInput)
		inside := map[string]bool{}
		if s := state.(string); s != "" {
			for _, x := range strings.Split(s, ",") {
				inside[strings.TrimSuffix(x, "*")] = strings.HasSuffix(x, "*")
			}
		}
		if !in.enter {
			delete(inside, in.holder)
		} else {
			ok := true
			switch {
			case in.limit > 0:
				ok = len(inside) < in.limit
			case in.exclusive:
				ok = len(inside) == 0
			default:
				for _, x := range inside {
					ok = ok && !x
				}
			}
			if !ok {
				return false, state
			}
			inside[in.holder] = in.exclusive
		}
		names := make([]string, 0, len(inside))
		for n, x := range inside {
			if x {
				n += "*"
			}
			names = append(names, n)
		}
		slices.Sort(names)
		return true, strings.Join(names, ",")
	},
	DescribeOperation: func(input, _ any) string { return input.(resInput).desc },
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "nobody inside"
		}
		return "inside: " + strings.ReplaceAll(state.(string), "*", "")
	},
}

// recipeState is the highest accepted token and who presented it.
type recipeState struct {
	max uint64
	by  string
}

var recipeModel = porcupine.Model{
	Init: func() any { return recipeState{} },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(resInput)
		s := state.(recipeState)
		allowed := in.token != 0 && (in.token > s.max || in.token == s.max && (in.holder == s.by || s.by == ""))
		if allowed != in.accepted {
			return false, state
		}
		if in.accepted && (in.token > s.max || s.by == "") {
			s = recipeState{in.token, in.holder}
		}
		return true, s
	},
	DescribeOperation: func(input, _ any) string { return input.(resInput).desc },
	DescribeState: func(state any) string {
		s := state.(recipeState)
		return fmt.Sprintf("highest accepted token %d (%s)", s.max, s.by)
	},
}

// resourceOps returns the accepted critical sections (entries and leaves) of the
// resource named res (Event.Resource) and every entry decision (for the fencing
// rule). An entry without a completion (a guard that could not decide) is none.
func resourceOps(v *view, res string) (sections, decisions []porcupine.Operation) {
	var names []string
	for _, e := range v.events {
		if (e.Op == OpEnter || e.Op == OpLeave) && e.Resource == res {
			names = append(names, e.Client)
		}
	}
	ids := clientIDs(names)
	accepted := map[string]bool{}
	calls := map[int64]int64{} // a guard's entries: Seq → the call's time
	for _, e := range v.events {
		if e.Resource != res {
			continue
		}
		t := e.T - v.start
		switch {
		case e.Op == OpEnter && e.Phase == Call:
			calls[e.Seq] = t
		case e.Op == OpEnter:
			call, ok := t, true
			if e.Seq != 0 {
				call, ok = calls[e.Seq]
			}
			if !ok {
				continue
			}
			in := resInput{holder: e.Client, enter: true, exclusive: e.Kind != "shared", limit: e.Limit, token: e.Token, accepted: e.Phase == OK}
			verb := "refused"
			if in.accepted {
				verb = "accepted"
			}
			in.desc = fmt.Sprintf("%s enters with token %d: %s", e.Client, e.Token, verb)
			decisions = append(decisions, porcupine.Operation{ClientId: ids[e.Client], Call: call, Return: t, Input: in})
			if in.accepted {
				accepted[e.Client] = true
				sections = append(sections, porcupine.Operation{ClientId: ids[e.Client], Call: call, Return: t, Input: in})
			}
		case e.Op == OpLeave:
			if accepted[e.Client] {
				delete(accepted, e.Client)
				sections = append(sections, porcupine.Operation{ClientId: ids[e.Client], Call: t, Return: t,
					Input: resInput{holder: e.Client, desc: e.Client + " leaves"}})
			}
		}
	}
	return sections, decisions
}

// resourceOverlaps names the entries of the resource named res that found another
// holder inside.
func resourceOverlaps(v *view, res string) []string {
	var out []string
	inside := map[string]Event{}
	for _, e := range v.events {
		if e.Resource != res {
			continue
		}
		switch {
		case e.Op == OpEnter && e.Phase == OK:
			for other, oe := range inside {
				if e.Kind == "shared" && oe.Kind == "shared" {
					continue
				}
				if e.Limit > 0 && len(inside) < e.Limit {
					continue
				}
				out = append(out, fmt.Sprintf("%s (token %d) entered the resource at %s while %s (token %d) was inside", e.Client, e.Token, v.at(e.T), other, oe.Token))
			}
			inside[e.Client] = e
		case e.Op == OpLeave:
			delete(inside, e.Client)
		}
	}
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

// grantedWithin reports whether l is met.
func (v *view) grantedWithin(l liveness) bool {
	for _, h := range v.holds {
		if h.key == l.key && h.client != l.not && h.start >= l.after && time.Duration(h.start-l.after) <= l.within {
			return true
		}
	}
	return false
}

// overBound lists the operations of b that took longer than its bound.
func (v *view) overBound(b bound) []string {
	calls := map[int64]Event{}
	var out []string
	for _, e := range v.events {
		if e.Op != b.op || (b.client != "" && e.Client != b.client) {
			continue
		}
		switch e.Phase {
		case Call:
			calls[e.Seq] = e
		case OK, Fail:
			if c, ok := calls[e.Seq]; ok && time.Duration(e.T-c.T) > b.within {
				out = append(out, fmt.Sprintf("%s: %s's %s took %v (bound %v)", b.what, e.Client, b.op, time.Duration(e.T-c.T).Round(time.Millisecond), b.within))
			}
			delete(calls, e.Seq)
		}
	}
	for _, c := range calls { // never returned
		out = append(out, fmt.Sprintf("%s: %s's %s called at %s never returned (bound %v)", b.what, c.Client, b.op, v.at(c.T), b.within))
	}
	return out
}

// lateEnds lists the leases of l.key whose Done closed later than l allows, or never.
func (v *view) lateEnds(l lasts) []string {
	ends := map[int64]int64{}
	for _, e := range v.events {
		if e.Op == OpEnd {
			ends[e.Lease] = e.T
		}
	}
	var out []string
	for _, h := range v.grants(l.key) {
		end, ok := ends[h.lease]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: %s's lease of %s, granted at %s, was still open when the trial ended (bound %v)", l.what, h.client, l.key, v.at(h.start), l.within))
		case time.Duration(end-h.start) > l.within:
			out = append(out, fmt.Sprintf("%s: %s's lease of %s, granted at %s, ended at %s, past its bound of %v", l.what, h.client, l.key, v.at(h.start), v.at(end), l.within))
		}
	}
	return out
}

// wrongCauses lists the losses of cs's leases whose cause is not one cs allows.
func (v *view) wrongCauses(cs causes) []string {
	var out []string
	for _, e := range v.events {
		if e.Op != OpEnd || e.Cause == "" || (cs.key != "" && e.Key != cs.key) || (cs.client != "" && e.Client != cs.client) {
			continue
		}
		if !slices.Contains(cs.want, e.Cause) {
			out = append(out, fmt.Sprintf("%s: %s's lease of %s ended at %s with cause %q (%s), want %s",
				cs.what, e.Client, e.Key, v.at(e.T), e.Cause, e.Err, strings.Join(cs.want, " or ")))
		}
	}
	return out
}

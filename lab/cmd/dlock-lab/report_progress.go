package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// progress shows how far dlock-lab compare has got: on a terminal, one line redrawn in
// place (a bar over the steps, the running test, the elapsed time); elsewhere
// (a log file, CI) plain lines, one per finished top-level test or scenario.
type progress struct {
	mu      sync.Mutex
	f       *os.File
	tty     bool
	steps   int // packages to test, plus the benchmarks
	ndone   int
	started int
	begin   time.Time
	current string
	drawn   time.Time
	passed  int
	failed  int
}

func newProgress(f *os.File, steps int) *progress {
	return &progress{f: f, tty: isTerminal(f), steps: max(steps, 1), begin: time.Now()}
}

// isTerminal reports whether f is a terminal (TCGETS succeeds on it).
func isTerminal(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// start says that step name begins.
func (p *progress) start(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current = name
	p.started++
	if !p.tty {
		fmt.Fprintf(p.f, "compare: [%d/%d] %s (%s elapsed)\n", p.started, p.steps, name, p.elapsed())
		return
	}
	p.draw(true)
}

// test says that test name of step began.
func (p *progress) test(step, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current = step + ": " + name
	if p.tty {
		p.draw(false)
	}
}

// line reports a line of step's own progress (the benchmarks'): printed as it is
// where there is no terminal, shown as the current activity where there is.
func (p *progress) line(step, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current = step + ": " + text
	if p.tty {
		p.draw(false)
		return
	}
	fmt.Fprintf(p.f, "compare:   %s: %s\n", step, text)
}

// result records a finished test. Plain output names top-level tests and the
// scenarios and properties (CamelCase subtests; harness groups are lower case).
func (p *progress) result(step, name, action string, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch action {
	case "pass":
		p.passed++
	case "fail":
		p.failed++
	}
	if p.tty {
		if action == "fail" {
			p.clearLine()
			fmt.Fprintf(p.f, "FAIL %s: %s\n", step, name)
		}
		p.draw(false)
		return
	}
	last := name[strings.LastIndex(name, "/")+1:]
	if !strings.Contains(name, "/") || last != "" && last[0] >= 'A' && last[0] <= 'Z' || action == "fail" {
		fmt.Fprintf(p.f, "compare:   %s %s: %s (%s)\n", step, name, action, took.Round(10*time.Millisecond))
	}
}

// note prints a line of its own.
func (p *progress) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.clearLine()
	}
	fmt.Fprintf(p.f, "compare: "+format+"\n", args...)
	if p.tty {
		p.draw(true)
	}
}

// done says that a step finished.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ndone++
	if p.tty {
		p.draw(true)
	}
}

// finish ends the progress display.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.clearLine()
	}
	fmt.Fprintf(p.f, "compare: finished in %s: %d tests passed, %d failed\n", p.elapsed(), p.passed, p.failed)
}

func (p *progress) elapsed() string { return time.Since(p.begin).Round(time.Second).String() }

func (p *progress) clearLine() { fmt.Fprint(p.f, "\r\x1b[2K") }

// draw redraws the bar, at most 10 times a second unless forced.
func (p *progress) draw(force bool) {
	if !force && time.Since(p.drawn) < 100*time.Millisecond {
		return
	}
	p.drawn = time.Now()
	const width = 24
	filled := width * p.ndone / p.steps
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	cur := p.current
	if len(cur) > 60 {
		cur = "…" + cur[len(cur)-59:]
	}
	p.clearLine()
	fmt.Fprintf(p.f, "%s %d/%d  %s  ✓%d ✗%d  %s", bar, p.ndone, p.steps, p.elapsed(), p.passed, p.failed, cur)
}

package cli

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/clitest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// The end-to-end tests run the real CLI in real processes: TestMain builds dlock and
// the test command testdata/child (see there) into a temporary directory.
var (
	dlockBin      string // the dlock binary
	childBin      string // the command the tests run under a lock
	thirdPartyBin string // a dlock binary with a backend of its own (testdata/thirdparty)
)

func TestMain(m *testing.M) {
	dir, err := clitest.Build(".", "../cmd/dlock", "./testdata/child", "./testdata/thirdparty")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlockBin, childBin, thirdPartyBin = filepath.Join(dir, "dlock"), filepath.Join(dir, "child"), filepath.Join(dir, "thirdparty")
	if old := os.Getenv("DLOCK_E2E_DLOCK"); old != "" {
		// Another dlock binary under the same tests (a negative control: an older
		// build must fail the checks that its bugs break).
		dlockBin = old
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(servertest.Finish(code))
}

// runLong runs dlock with args in dir (the package directory if ""), with extra
// environment, for at most timeout, and returns its exit code, stdout and stderr.
func runLong(t *testing.T, timeout time.Duration, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, dlockBin, timeout, dir, env, args...)
}

// proc is a running "dlock" (or any) process with its output read line by line.
type proc struct {
	cmd    *exec.Cmd
	stdin  *os.File
	out    chan string // stdout lines; closed at EOF (every process holding it has exited)
	errs   chan string // stderr lines; closed at EOF
	mu     sync.Mutex
	stderr strings.Builder
	waited chan struct{}
	code   int
}

// startDlock starts dlock with args.
func startDlock(t *testing.T, args ...string) *proc {
	t.Helper()
	return startProc(t, exec.Command(dlockBin, args...))
}

func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	inR, inW := pipe(t)
	outR, outW := pipe(t)
	errR, errW := pipe(t)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	p := &proc{cmd: cmd, stdin: inW, out: make(chan string, 100), errs: make(chan string, 100), waited: make(chan struct{})}
	go lines(outR, p.out, nil)
	go lines(errR, p.errs, func(s string) { p.mu.Lock(); p.stderr.WriteString(s + "\n"); p.mu.Unlock() })
	go func() {
		cmd.Wait()
		p.code = exitStatus(cmd.ProcessState)
		close(p.waited)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.waited:
		default:
			cmd.Process.Kill() // the command under it dies with it (parent-death signal)
			<-p.waited
		}
		drain(p.out)
		drain(p.errs)
	})
	return p
}

func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return r, w
}

func lines(f *os.File, c chan<- string, also func(string)) {
	defer f.Close()
	defer close(c)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if also != nil {
			also(sc.Text())
		}
		c <- sc.Text()
	}
}

// drain reads c to its end, or gives up after patience (a process that outlives the
// test is reported by the test that cares).
func drain(c <-chan string) {
	timeout := time.After(patience)
	for {
		select {
		case _, ok := <-c:
			if !ok {
				return
			}
		case <-timeout:
			return
		}
	}
}

func exitStatus(ps *os.ProcessState) int { return clitest.ExitStatus(ps) }

const patience = 20 * time.Second // how long a test waits for what must happen

// expect reads c until a line containing want.
func expect(t *testing.T, c <-chan string, want string) string {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case l, ok := <-c:
			if !ok {
				t.Fatalf("output ended without a line containing %q", want)
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line containing %q within %v", want, patience)
		}
	}
}

// wait returns dlock's exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.waited:
		return p.code
	case <-time.After(patience):
		t.Fatalf("%v still running after %v; stderr:\n%s", p.cmd.Args, patience, p.stderrText())
		return 0
	}
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitCode waits for dlock to exit and fails the test unless it exited with want.
func (p *proc) waitCode(t *testing.T, want int) {
	t.Helper()
	if got := p.wait(t); got != want {
		drain(p.errs) // let stderr finish so that the message is complete
		t.Fatalf("%v: exit code %d, want %d; stderr:\n%s", p.cmd.Args[1:], got, want, p.stderrText())
	}
}

// runDlock runs dlock to the end and returns its exit code and stderr.
func runDlock(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := startDlock(t, args...)
	code := p.wait(t)
	drain(p.out)
	drain(p.errs)
	return code, p.stderrText()
}

// uniqueKey is a lock key no other test uses.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("dlock-e2e/%s/%d", t.Name(), time.Now().UnixNano())
}

package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// openPTY returns a new pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	var n uint32
	if err := ioctl(m, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		m.Close()
		t.Fatal(err)
	}
	if err := ioctl(m, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	return m, s
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// startOnTerminal starts dlock as the session leader of a new terminal, as a login
// shell's foreground job would be, and returns the terminal's output lines.
func startOnTerminal(t *testing.T, args ...string) (*exec.Cmd, *os.File, <-chan string) {
	t.Helper()
	return startSession(t, exec.Command(dlockBin, args...))
}

// startSession starts cmd as the session leader of a new terminal.
func startSession(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, *os.File, <-chan string) {
	t.Helper()
	return startSessionWith(t, cmd, nil)
}

// startSessionWith is startSession with the terminal set up by setup (nil: as it
// comes) before cmd starts.
func startSessionWith(t *testing.T, cmd *exec.Cmd, setup func(slave *os.File)) (*exec.Cmd, *os.File, <-chan string) {
	t.Helper()
	master, slave := openPTY(t)
	if setup != nil {
		setup(slave)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	out := make(chan string, 100)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(master) // ends with EIO when no process has the terminal open
		for sc.Scan() {
			out <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		master.Close()
		drain(out)
	})
	return cmd, master, out
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return exitStatus(cmd.ProcessState)
	case <-time.After(patience):
		t.Fatalf("dlock still running after %v", patience)
		return 0
	}
}

// TestTerminalRead: in the foreground of a terminal, the command is the terminal's
// foreground job and can read from it (a background job would be stopped by SIGTTIN).
func TestTerminalRead(t *testing.T) {
	cmd, master, out := startOnTerminal(t, "run", "--url", "mem://", "--key", "k", "--", childBin, "read")
	expect(t, out, "ready")
	if _, err := master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	expect(t, out, "read hello")
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestTerminalInterrupt: Ctrl-C reaches the command once (not once from the terminal
// and again from dlock).
func TestTerminalInterrupt(t *testing.T) {
	cmd, master, out := startOnTerminal(t, "run", "--url", "mem://", "--key", "k", "--", childBin, "trap", "42")
	expect(t, out, "ready")
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	expect(t, out, fmt.Sprintf("got %d", syscall.SIGINT))
	cmd.Process.Signal(syscall.SIGTERM)
	var rest []string
	for l := range out {
		rest = append(rest, l)
	}
	if code := waitExit(t, cmd); code != 42 {
		t.Fatalf("exit %d, want the command's 42; output %q", code, rest)
	}
	for _, l := range rest {
		if strings.Contains(l, fmt.Sprintf("got %d", syscall.SIGINT)) {
			t.Errorf("the command got SIGINT twice: %q", rest)
		}
	}
	if len(rest) == 0 || !strings.Contains(strings.Join(rest, "\n"), fmt.Sprintf("got %d", syscall.SIGTERM)) {
		t.Errorf("no SIGTERM reached the command: %q", rest)
	}
}

// TestTerminalStop: Ctrl-Z stops the command and dlock, so that the shell gets the
// terminal back; fg resumes both and the command reads the terminal again.
func TestTerminalStop(t *testing.T) {
	shell, master, out := startSession(t, exec.Command(childBin, "jobshell",
		dlockBin, "run", "--url", "mem://", "--key", "k", "--", childBin, "read"))
	expect(t, out, "ready")
	if _, err := master.Write([]byte{26}); err != nil { // Ctrl-Z
		t.Fatal(err)
	}
	expect(t, out, "shell: stopped")
	if _, err := master.Write([]byte("fg\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	expect(t, out, "read hello")
	expect(t, out, "shell: exit 0")
	if code := waitExit(t, shell); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestTerminalStopPastDeadline: Ctrl-Z stops the command and dlock together; when the
// shell continues them after the lease's deadline has passed (renewals stopped with
// dlock), dlock checks the lease before it lets the command go on: the command is
// killed (it never reads the terminal again) and dlock exits 76.
func TestTerminalStopPastDeadline(t *testing.T) {
	shell, master, out := startSession(t, exec.Command(childBin, "jobshell",
		dlockBin, "run", "--url", "mem://", "--key", "k", "--ttl", "600ms", "--", childBin, "read", "stubborn"))
	expect(t, out, "ready")
	if _, err := master.Write([]byte{26}); err != nil { // Ctrl-Z
		t.Fatal(err)
	}
	expect(t, out, "shell: stopped")
	time.Sleep(time.Second) // both stay stopped past the lease's 600ms TTL: time itself is the subject
	if _, err := master.Write([]byte("fg\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range out {
		rest = append(rest, l)
	}
	if code := waitExit(t, shell); code != exitLost {
		t.Fatalf("exit %d, want %d; output %q", code, exitLost, rest)
	}
	for _, l := range rest {
		if strings.Contains(l, "read hello") {
			t.Errorf("the command went on after its lease had ended: %q", rest)
		}
	}
}

// TestStopSignalStopsCommand: a SIGTSTP sent to dlock alone (no terminal) stops the
// command too; when both are continued past the lease's deadline, the command is
// killed and dlock exits 76.
func TestStopSignalStopsCommand(t *testing.T) {
	p := startDlock(t, "run", "--url", "mem://", "--key", "k", "--ttl", "600ms", "--", childBin, "hold")
	expect(t, p.out, "ready")
	if err := p.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, p.cmd.Process.Pid)
	waitStopped(t, childOf(t, p.cmd.Process.Pid)) // the command stopped with dlock
	time.Sleep(time.Second)                       // stopped past the 600ms TTL
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	p.waitCode(t, exitLost)
}

// childOf returns the pid of pid's one child process.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, task := range tasks { // a child belongs to the thread that forked it
		b, _ := os.ReadFile(task)
		kids = append(kids, strings.Fields(string(b))...)
	}
	if len(kids) != 1 {
		t.Fatalf("process %d has children %v, want one", pid, kids)
	}
	child, _ := strconv.Atoi(kids[0])
	return child
}

// waitStopped waits until process pid is stopped (state T in /proc).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
	}
	t.Fatalf("process %d not stopped within %v", pid, patience)
}

// TestTerminalTostop: with "stty tostop" a background process that writes to the
// terminal is stopped (SIGTTOU) — and dlock is in the background of its terminal
// while its command has it. When the lease is lost, nothing may stop dlock between
// its decision and the kill: the command (which ignores SIGTERM, as does its child)
// is killed, dlock says why and exits 76, and the job-control shell never sees it
// stop.
func TestTerminalTostop(t *testing.T) {
	r := servertest.Redis(t)
	key := uniqueKey(t)
	_, _, out := startSessionWith(t, exec.Command(childBin, "jobshell",
		dlockBin, "run", "--url", "redis://"+r.Addr(), "--key", key, "--ttl", "900ms", "--", childBin, "stubborn"),
		func(slave *os.File) {
			var tio syscall.Termios
			if err := ioctl(slave, syscall.TCGETS, unsafe.Pointer(&tio)); err != nil {
				t.Fatal(err)
			}
			tio.Lflag |= syscall.TOSTOP
			if err := ioctl(slave, syscall.TCSETS, unsafe.Pointer(&tio)); err != nil {
				t.Fatal(err)
			}
		})
	expect(t, out, "ready grandchild")
	if _, err := r.Do(context.Background(), "DEL", key); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for l := range out {
		seen = append(seen, l)
		switch {
		case strings.Contains(l, "shell: stopped"):
			t.Fatalf("dlock was stopped (SIGTTOU) after the loss; terminal: %q", seen)
		case strings.Contains(l, "shell: exit"):
			if l != fmt.Sprintf("shell: exit %d", exitLost) {
				t.Fatalf("%q, want exit %d; terminal: %q", l, exitLost, seen)
			}
			if !strings.Contains(strings.Join(seen, "\n"), "lost") {
				t.Errorf("dlock did not say why on the terminal: %q", seen)
			}
			return
		}
	}
	t.Fatalf("the terminal closed before the shell reported dlock's exit: %q", seen)
}

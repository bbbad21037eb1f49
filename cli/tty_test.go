package cli

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
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
	master, slave := openPTY(t)
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

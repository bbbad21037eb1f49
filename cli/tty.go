package cli

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"
)

// Terminal handling of "dlock run". The command always runs in a process group of its
// own (so that signals and a lost lease reach everything it started). When dlock is in
// the foreground of a terminal, that group is made the terminal's foreground group, as
// a shell does for a job: the command can read the terminal, and Ctrl-C / Ctrl-Z reach
// it directly, once. When the command stops (Ctrl-Z), dlock takes the terminal back
// and stops its own group, so that the shell regains control; when the shell resumes
// dlock (fg), dlock checks the lease first: it hands the terminal back and resumes the
// command if the lease still holds, and kills the command if it ended meanwhile.

// ttyState is the terminal dlock found itself in the foreground of.
type ttyState struct {
	fd   int // dlock's stdin
	pgrp int // dlock's process group
}

// foregroundTTY returns the terminal on stdin if dlock's process group is its
// foreground group, else nil.
func foregroundTTY() *ttyState {
	fg, err := tcgetpgrp(0)
	if err != nil {
		return nil
	}
	if own := syscall.Getpgrp(); fg == own {
		return &ttyState{fd: 0, pgrp: own}
	}
	return nil
}

// restore makes dlock's group the terminal's foreground group again. dlock is in the
// background when it does, so SIGTTOU must be ignored (the supervisor ignores it from
// the command's start on; no child is started after that, so none inherits it).
func (t *ttyState) restore() {
	signal.Ignore(syscall.SIGTTOU)
	_ = tcsetpgrp(t.fd, t.pgrp)
}

// waitChild waits for child to exit and returns its wait status. With a terminal it
// also passes the command's stops on to dlock's own group (see above); when dlock is
// continued it continues the command only if held() — the lease still holds — and
// kills the command's group otherwise.
func waitChild(child *exec.Cmd, tty *ttyState, held func() bool) (syscall.WaitStatus, error) {
	if tty == nil {
		err := child.Wait()
		if child.ProcessState != nil {
			if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); ok {
				return ws, nil
			}
		}
		return 0, err
	}
	defer child.Process.Release()
	pid := child.Process.Pid
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, err
		case !ws.Stopped():
			return ws, nil
		}
		tty.restore()
		tty.stopSelf()
		if !held() {
			_ = syscall.Kill(-pid, syscall.SIGKILL) // a stopped process dies of it too
			continue
		}
		_ = tcsetpgrp(tty.fd, pid)
		_ = syscall.Kill(-pid, syscall.SIGCONT)
	}
}

// stopSelf stops dlock's process group as the terminal's Ctrl-Z would, and returns
// once the shell has continued it. kill returns before the stop takes effect (another
// thread may take the signal), so it waits for the SIGCONT. An orphaned group (no
// shell to resume it) is not stopped, as POSIX has the kernel discard its SIGTSTP.
func (t *ttyState) stopSelf() {
	ppid := syscall.Getppid()
	ppgrp, err := syscall.Getpgid(ppid)
	if err != nil || ppgrp == t.pgrp || getsid(ppid) != getsid(0) {
		return // orphaned as far as dlock's parent goes
	}
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	if syscall.Kill(-t.pgrp, syscall.SIGTSTP) == nil {
		<-cont
	}
}

func getsid(pid int) int {
	sid, _, e := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if e != 0 {
		return -1
	}
	return int(sid)
}

func tcgetpgrp(fd int) (int, error) {
	var pgrp int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); e != 0 {
		return 0, e
	}
	return int(pgrp), nil
}

func tcsetpgrp(fd, pgrp int) error {
	p := int32(pgrp)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}

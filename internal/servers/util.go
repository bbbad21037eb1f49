package servers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// childAttr is the SysProcAttr of every child: its own process group, and
// SIGKILL when the parent dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// copyDir copies the tree src to dst (regular files, directories, symlinks).
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return nil // sockets, pipes: skip
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ChildProcesses lists the live direct children of this process (pid and
// command line), from /proc. After every server is closed it should be empty;
// servertest.Main checks that nothing leaked.
func ChildProcesses() []string {
	self := os.Getpid()
	var out []string
	eachProcess(func(pid int, f []string) {
		if ppid, _ := strconv.Atoi(f[1]); ppid != self {
			return
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		out = append(out, fmt.Sprintf("%d %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))))
	})
	return out
}

// eachProcess calls f with the pid and the /proc stat fields after the command name
// (state, ppid, pgrp, …) of every live process but zombies.
func eachProcess(f func(pid int, fields []string)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		f(pid, fields)
	}
}

// ownerFile marks a temporary directory with the pid of the process that made
// it, so a later run can remove directories left by a killed test binary.
const ownerFile = ".dlock-owner"

var sweepOnce sync.Once

// sweepStale removes dlock temporary directories whose owner process is gone
// (left behind when a test binary was SIGKILLed or timed out).
func sweepStale() {
	sweepOnce.Do(func() {
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "dlock-*"))
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, ownerFile))
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 0 || pid == os.Getpid() {
				continue
			}
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				os.RemoveAll(d)
			}
		}
	})
}

// addrsOf returns the address of each server of xs, in order.
func addrsOf[T interface{ Addr() string }](xs []T) []string {
	a := make([]string, len(xs))
	for i, x := range xs {
		a[i] = x.Addr()
	}
	return a
}

// Command child is what the end-to-end tests of dlock run under a lock:
//
//	child exit N            exit with code N
//	child kill N            die of signal N
//	child env FILE          write DLOCK_KEY and DLOCK_TOKEN to FILE
//	child trap CODE         print "ready", then "got N" for each signal N dlock forwards;
//	                        exit CODE on SIGTERM
//	child hold              print "ready", wait for stdin to close, exit 0 (SIGTERM kills it)
//	child pid N             print "pid <its pid>", exit N at once
//	child stubborn          ignore SIGTERM, start a stubborn grandchild, print "ready
//	                        child"; the grandchild prints "ready grandchild"; both wait for
//	                        stdin to close
//	child critical FILE ID  append "enter ID $DLOCK_TOKEN" to FILE, work 25ms, append "leave ID"
//	child read [stubborn]   print "ready", read a line from stdin, print "read LINE", exit 0
//	                        (stubborn: ignore SIGTERM)
//	child stamp FILE ID     ignore SIGTERM; append "ID <unix ns>" to FILE every 2ms, print
//	                        "ready" after the first; exit 0 on SIGINT
//	child tick FILE ID      append "ID start UNIXNANO", print "ready", then append "ID tick
//	                        UNIXNANO" every 10ms until killed
//	child jobshell CMD...   a job-control shell of one job, for a terminal test: run CMD
//	                        as the terminal's foreground job; when it stops, print "shell:
//	                        stopped", take the terminal, read a line (any: it means fg),
//	                        give the terminal back and continue the job; at its end print
//	                        "shell: exit N" and exit N
//
// It uses only the standard library so that it starts in milliseconds.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch arg(0) {
	case "exit":
		n, _ := strconv.Atoi(arg(1))
		return n
	case "kill":
		n, _ := strconv.Atoi(arg(1))
		signal.Reset(syscall.Signal(n))
		syscall.Kill(os.Getpid(), syscall.Signal(n))
		select {}
	case "env":
		err := os.WriteFile(arg(1), []byte("DLOCK_KEY="+os.Getenv("DLOCK_KEY")+"\nDLOCK_TOKEN="+os.Getenv("DLOCK_TOKEN")+"\n"), 0o644)
		if err != nil {
			return 3
		}
		return 0
	case "trap":
		code, _ := strconv.Atoi(arg(1))
		c := make(chan os.Signal, 16)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
		fmt.Println("ready")
		for s := range c {
			fmt.Printf("got %d\n", s.(syscall.Signal))
			if s == syscall.SIGTERM {
				return code
			}
		}
	case "tick":
		f, err := os.OpenFile(arg(1), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return 3
		}
		fmt.Fprintf(f, "%s start %d\n", arg(2), time.Now().UnixNano())
		fmt.Println("ready")
		for {
			time.Sleep(10 * time.Millisecond)
			fmt.Fprintf(f, "%s tick %d\n", arg(2), time.Now().UnixNano())
		}
	case "pid":
		n, _ := strconv.Atoi(arg(1))
		fmt.Printf("pid %d\n", os.Getpid())
		return n
	case "hold":
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		return 0
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		who := "grandchild"
		if arg(1) != who {
			who = "child"
			gc := exec.Command(os.Args[0], "stubborn", "grandchild")
			gc.Stdin, gc.Stdout, gc.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := gc.Start(); err != nil {
				return 3
			}
		}
		fmt.Println("ready", who)
		io.Copy(io.Discard, os.Stdin)
		return 0
	case "critical":
		f, err := os.OpenFile(arg(1), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return 3
		}
		defer f.Close()
		fmt.Fprintf(f, "enter %s %s\n", arg(2), os.Getenv("DLOCK_TOKEN"))
		time.Sleep(25 * time.Millisecond) // the work done under the lock
		fmt.Fprintf(f, "leave %s\n", arg(2))
		return 0
	case "stamp":
		signal.Ignore(syscall.SIGTERM)
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGINT)
		f, err := os.OpenFile(arg(1), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return 3
		}
		defer f.Close()
		for i := 0; ; i++ {
			fmt.Fprintf(f, "%s %d\n", arg(2), time.Now().UnixNano())
			if i == 0 {
				fmt.Println("ready")
			}
			select {
			case <-stop:
				return 0
			case <-time.After(2 * time.Millisecond):
			}
		}
	case "read":
		if arg(1) == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("ready")
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		fmt.Printf("read %s\n", strings.TrimSpace(line))
		return 0
	case "jobshell":
		return jobshell(args[1:])
	}
	fmt.Fprintf(os.Stderr, "child: unknown mode %q\n", arg(0))
	return 2
}

func jobshell(argv []string) int {
	job := exec.Command(argv[0], argv[1:]...)
	job.Stdin, job.Stdout, job.Stderr = os.Stdin, os.Stdout, os.Stderr
	job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	if err := job.Start(); err != nil {
		fmt.Println("shell:", err)
		return 3
	}
	signal.Ignore(syscall.SIGTTOU) // as shells do: take the terminal back from the background
	pid, in := job.Process.Pid, bufio.NewReader(os.Stdin)
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil); err == syscall.EINTR {
			continue
		} else if err != nil {
			fmt.Println("shell:", err)
			return 3
		}
		if !ws.Stopped() {
			code := ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			setForeground(syscall.Getpgrp())
			fmt.Println("shell: exit", code)
			return code
		}
		setForeground(syscall.Getpgrp())
		fmt.Println("shell: stopped")
		in.ReadString('\n')
		setForeground(pid)
		syscall.Kill(-pid, syscall.SIGCONT)
	}
}

func setForeground(pgrp int) error {
	p := int32(pgrp)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}

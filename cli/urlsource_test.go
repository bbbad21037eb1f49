package cli

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestURLSources: the URL comes from --url, --url-file or DLOCK_URL; two flags at
// once, an empty file or a missing one are usage errors; the help says so.
func TestURLSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "url")
	if err := os.WriteFile(file, []byte("mem://\nignored second line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(dlockBin, append([]string{"run", "--key", uniqueKey(t)}, append(args, "--", childBin, "exit", "7")...)...)
		cmd.Env = append(os.Environ(), env...)
		p := startProc(t, cmd)
		code := p.wait(t)
		drain(p.out)
		drain(p.errs)
		return code, p.stderrText()
	}
	for name, c := range map[string]struct {
		env  []string
		args []string
	}{
		"--url":      {nil, []string{"--url", "mem://"}},
		"--url-file": {nil, []string{"--url-file", file}},
		"DLOCK_URL":  {[]string{"DLOCK_URL=mem://"}, nil},
		"flag wins":  {[]string{"DLOCK_URL=nope://"}, []string{"--url", "mem://"}},
	} {
		if code, stderr := run(c.env, c.args...); code != 7 {
			t.Errorf("%s: exit %d, want the command's 7; stderr:\n%s", name, code, stderr)
		}
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"none":         {nil, "--url is required (or --url-file, or $DLOCK_URL)"},
		"both":         {[]string{"--url", "mem://", "--url-file", file}, "not both"},
		"empty file":   {[]string{"--url-file", empty}, "first line is empty"},
		"missing file": {[]string{"--url-file", filepath.Join(dir, "missing")}, "no such file"},
	} {
		if code, stderr := run(nil, c.args...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, stderr, exitUsage, c.want)
		}
	}
	// dlock elect takes its URL the same way (and runs its command as run does).
	elect := exec.Command(dlockBin, "elect", "--name", uniqueKey(t), "--", childBin, "exit", "7")
	elect.Env = append(os.Environ(), "DLOCK_URL=mem://")
	p := startProc(t, elect)
	code := p.wait(t)
	drain(p.out)
	drain(p.errs)
	if code != 7 {
		t.Errorf("dlock elect with DLOCK_URL: exit %d, want the command's 7; stderr:\n%s", code, p.stderrText())
	}
	for _, cmd := range []string{"run", "check", "elect", "leader"} {
		p := startDlock(t, cmd, "--help")
		var out strings.Builder
		for l := range p.out {
			out.WriteString(l + "\n")
		}
		p.waitCode(t, 0)
		for _, want := range []string{"-url-file FILE", "DLOCK_URL", "ps(1)", "docs/connecting.md"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("dlock %s --help: no %q", cmd, want)
			}
		}
	}
}

// cliSecret is the Redis password of TestNoPasswordInOutputs.
const cliSecret = "S3CRET-cli-pw"

// TestNoPasswordInOutputs runs dlock run and dlock check, succeeding and failing,
// with a URL that holds a password, and finds the password in none of what they
// write: stdout, stderr, the metrics page, the command's environment, the suite's
// report files.
func TestNoPasswordInOutputs(t *testing.T) {
	r := servertest.NewRedis(t, servers.RedisOptions{Password: cliSecret})
	good := "redis://:" + cliSecret + "@" + r.Addr()
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "url")
	if err := os.WriteFile(urlFile, []byte(good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var outputs []string // every output, named
	collect := func(name string, p *proc) {
		var out strings.Builder
		for l := range p.out {
			out.WriteString(l + "\n")
		}
		drain(p.errs)
		outputs = append(outputs, name+" stdout:\n"+out.String(), name+" stderr:\n"+p.stderrText())
	}
	start := func(env []string, args ...string) *proc {
		cmd := exec.Command(dlockBin, args...)
		cmd.Env = append(os.Environ(), env...)
		return startProc(t, cmd)
	}

	// dlock run, succeeding: the URL from DLOCK_URL, metrics scraped while it holds.
	key := uniqueKey(t)
	p := start([]string{"DLOCK_URL=" + good}, "run", "--key", key, "--metrics-addr", "127.0.0.1:0", "--", childBin, "hold")
	line := expect(t, p.errs, "metrics at ")
	outputs = append(outputs, "run stderr line:\n"+line)
	expect(t, p.out, "ready")
	resp, err := http.Get(strings.TrimSpace(line[strings.Index(line, "http://"):]))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	outputs = append(outputs, "metrics:\n"+string(body))
	p.stdin.Close()
	p.waitCode(t, 0)
	collect("run (succeeding)", p)

	// dlock run, succeeding: the URL from a file; the command's environment.
	envFile := filepath.Join(dir, "env")
	p = start(nil, "run", "--url-file", urlFile, "--key", key, "--", "sh", "-c", "env > "+envFile)
	p.waitCode(t, 0)
	collect("run --url-file", p)
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, "the command's environment:\n"+string(env))
	p = start([]string{"DLOCK_URL=" + good}, "run", "--key", key, "--", "sh", "-c", "env > "+envFile)
	p.waitCode(t, 0)
	collect("run with DLOCK_URL", p)
	if env, err = os.ReadFile(envFile); err != nil || strings.Contains(string(env), "DLOCK_URL=") {
		t.Errorf("the command inherited DLOCK_URL (%v)", err)
	}

	// dlock run, failing: a wrong password, a malformed URL, a lock held elsewhere.
	wrong := "redis://:" + cliSecret + "-WRONG@" + r.Addr()
	for name, c := range map[string]struct {
		url  string
		code int
		args []string
	}{
		"wrong password": {wrong, exitUnavailable, nil},
		"malformed":      {"redis://:" + cliSecret + "%zz@" + r.Addr(), exitUsage, nil},
		"unknown param":  {good + "?bogus=1", exitUsage, nil},
		"not acquired":   {good, exitTempFail, []string{"--wait", "0"}},
	} {
		if name == "not acquired" {
			holdLock(t, good, key+"/held")
		}
		args := append([]string{"run", "--key", key + "/held"}, c.args...)
		p := start([]string{"DLOCK_URL=" + c.url}, append(args, "--", childBin, "exit", "0")...)
		p.waitCode(t, c.code)
		collect("run ("+name+")", p)
	}

	// dlock check: the deployment check alone, the suite (a few properties), and a
	// wrong password.
	p = start(nil, "check", "--url-file", urlFile, "--doctor")
	p.waitCode(t, 1) // no persistence: exposed
	collect("check --doctor", p)
	p = start([]string{"DLOCK_URL=" + good}, "check", "--run", "MutualExclusion|OwnerOnlyRelease")
	if code := p.wait(t); code != 0 {
		t.Errorf("check: exit %d; stderr:\n%s", code, p.stderrText())
	}
	collect("check", p)
	p = start([]string{"DLOCK_URL=" + wrong}, "check")
	p.waitCode(t, exitUnavailable)
	collect("check (wrong password)", p)

	// The suite's report files, as "dlock check" has its child write them.
	reports := filepath.Join(dir, "reports")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, dlockBin)
	child.Env = append(os.Environ(), checkChildEnv+"="+good, checkRunEnv+"=MutualExclusion", results.DirEnv+"="+reports)
	out, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("the check child: %v\n%s", err, out)
	}
	outputs = append(outputs, "check child output:\n"+string(out))
	// Every file the child wrote: the cells and, below them, the trials' histories.
	files := 0
	if err := filepath.WalkDir(reports, func(f string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(reports, f)
		outputs = append(outputs, "report "+rel+":\n"+string(b))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("the check child wrote no report file")
	}

	for _, o := range outputs {
		if strings.Contains(o, "S3CRET") {
			t.Errorf("the password shows in %s", o)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/servers"
)

// chromium returns the headless browser, or skips (fails under
// DLOCK_REQUIRE_SERVERS=1) when it is not installed.
func chromium(t *testing.T) string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "chromium is not installed: apt-get install -y --no-install-recommends chromium (or make deps)"
	if servers.RequireServers() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browse opens page in headless Chromium and returns the DOM after its scripts ran,
// the console messages (errors included) and a screenshot.
func browse(t *testing.T, page string) (dom string, console []string, shot []byte) {
	t.Helper()
	bin := chromium(t)
	dir := t.TempDir()
	common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--enable-logging=stderr", "--v=0"}
	url := "file://" + page
	run := func(args ...string) (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(append(common, args...), url)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
		}
		return out.String(), errb.String()
	}
	dom, logs := run("--dump-dom")
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, ":CONSOLE") || strings.Contains(l, "Uncaught") {
			console = append(console, l)
		}
	}
	png := filepath.Join(dir, "shot.png")
	run("--screenshot="+png, "--window-size=1400,2000")
	shot, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	return dom, console, shot
}

// colors decodes a PNG and counts its distinct colours.
func colors(t *testing.T, data []byte) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot is not a valid PNG: %v", err)
	}
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}

// checkPage asserts that page rendered in a browser: its script ran (the marker
// and the title it sets) and the screenshot is not blank.
func checkPage(t *testing.T, page string) {
	t.Helper()
	dom, console, shot := browse(t, page)
	for _, l := range console {
		t.Errorf("console: %s", l)
	}
	if !strings.Contains(dom, `data-rendered="ok"`) {
		t.Errorf("the page's script did not run to its end (no data-rendered marker in the DOM)")
	}
	if !strings.Contains(dom, "<title>dlock comparison report: ") {
		t.Errorf("the page's script did not set the title")
	}
	if n := colors(t, shot); n < 16 {
		t.Errorf("the screenshot has %d distinct colours: blank?", n)
	}
}

// TestReportHTMLInBrowser renders the committed cells (testdata/cells) with --from
// and opens the page in headless Chromium.
func TestReportHTMLInBrowser(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runLong(t, time.Minute, "", nil, "compare", "--from", "testdata/cells", "--out", out)
	if code != 0 {
		t.Fatalf("compare --from: exit %d\n%s\n%s", code, stdout, stderr)
	}
	checkPage(t, filepath.Join(out, "report.html"))
}

// TestBrowserCheckCatchesBrokenPage is the negative control of checkPage: a blank
// page whose script throws is caught three ways (console error, no marker, blank).
func TestBrowserCheckCatchesBrokenPage(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.html")
	html := `<!DOCTYPE html><html><head><title>x</title></head><body>
<script>undefinedFunction(); document.body.setAttribute("data-rendered", "ok");</script></body></html>`
	if err := os.WriteFile(broken, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console, shot := browse(t, broken)
	if !strings.Contains(strings.Join(console, "\n"), "undefinedFunction is not defined") {
		t.Errorf("the script's error is not in the console messages: %q", console)
	}
	if strings.Contains(dom, `data-rendered="ok"`) {
		t.Error("the marker is set although the script threw before setting it")
	}
	if n := colors(t, shot); n >= 16 {
		t.Errorf("a blank page has %d colours: the blank check cannot fail", n)
	}
}

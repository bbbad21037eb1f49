package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/dlock-go/dlock/internal/cmdline"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/lab/docgen"
)

func init() {
	register(&command{
		Name:     "docs",
		Summary:  "render the documents' generated tables and figures from the committed report (or check them)",
		Synopsis: "dlock-lab docs [--report FILE] [--check]",
		Help:     docsHelp,
		Footer:   docsFooter,
		Flags:    docsFlags,
		Run:      docsCommand,
	})
}

const docsHelp = `
In the dlock source checkout, rewrite every generated region and figure of the
READMEs and docs/ from a report (default: the newest docs/results/*/report.json, the
committed run), so that what the documents say about each backend is what the run
showed. With --check, change nothing and list every disagreement instead: a region or
figure that differs, a marker that names no cell, a backticked name that is no
property or scenario, a verdict stated without a cell marker for the property or
scenario it is about (backticked, bare or in a path like TestFaults/single/X), a
sentence about "every backend" that a cell of the report contradicts, a measured
figure that comes from no marker (outside a section headed as an older run with its
date and commit). The documents are every README.md and docs/ (the dated records in
docs/results included, their generated report.md not). The test TestDocs in
lab/docgen runs the same check in CI.`

const docsFooter = `
Exit codes:
  0   the documents agree with the report (or were rewritten to)
  1   --check found disagreements (listed on stdout)
  64  usage error
  70  a document or the report could not be read or written`

type docsConfig struct {
	report string
	check  bool
}

var docsCfg docsConfig

func docsFlags(fs *flag.FlagSet) {
	docsCfg = docsConfig{}
	fs.StringVar(&docsCfg.report, "report", "", "the report.json to render from (default: the newest under docs/results)")
	fs.BoolVar(&docsCfg.check, "check", false, "only list where the documents disagree with the report")
}

func docsCommand(fs *flag.FlagSet) int {
	cmd := commands.Lookup("docs")
	if fs.NArg() > 0 {
		return cmd.UsageError(os.Stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
		return cmdline.ExitUsage
	}
	path := docsCfg.report
	if path == "" {
		if path, err = docgen.CommittedReport(root); err != nil {
			fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
			return cmdline.ExitSoftware
		}
	}
	r, err := report.Read(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
		return cmdline.ExitSoftware
	}
	files, err := docgen.Documents(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
		return cmdline.ExitSoftware
	}
	stale, err := docgen.Stale(root, r)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
		return cmdline.ExitSoftware
	}
	r.MarkStale(stale) // stale cells render as such
	if docsCfg.check {
		ids, err := docgen.Identifiers(root)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
			return cmdline.ExitSoftware
		}
		n := 0
		for _, p := range docgen.StaleProblems(path, stale) {
			fmt.Println(p)
			n++
		}
		for _, p := range docgen.EvidenceProblems(path, r) {
			fmt.Println(p)
			n++
		}
		if u := docgen.Unbound(r); u > 0 {
			fmt.Printf("%s: %d cells carry no code stamp (a report older than the stamps): whether they are stale cannot be told\n", path, u)
			n++
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
				return cmdline.ExitSoftware
			}
			for _, p := range docgen.Check(f, string(b), r, ids) {
				fmt.Println(p)
				n++
			}
		}
		if n > 0 {
			fmt.Fprintf(os.Stderr, "dlock-lab docs: %d disagreements with %s\n", n, path)
			return 1
		}
		return cmdline.ExitOK
	}
	changed, err := docgen.UpdateFiles(files, r)
	for _, f := range changed {
		fmt.Fprintf(os.Stderr, "dlock-lab docs: rewrote %s\n", f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab docs: %v\n", err)
		return cmdline.ExitSoftware
	}
	return cmdline.ExitOK
}

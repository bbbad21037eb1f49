package cli

import (
	"flag"
	"fmt"
	"os"

	"github.com/dlock-go/dlock/internal/docgen"
	"github.com/dlock-go/dlock/internal/report"
)

func init() {
	register(&command{
		Name:     "docs",
		Summary:  "render the documents' generated tables and figures from the committed report (or check them)",
		Synopsis: "dlock docs [--report FILE] [--check]",
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
property or scenario, a verdict stated without a cell marker (the test TestDocs in
internal/docgen runs the same check in CI).`

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
	cmd := commands["docs"]
	if fs.NArg() > 0 {
		return cmd.usageError(os.Stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock docs: %v\n", err)
		return exitUsage
	}
	path := docsCfg.report
	if path == "" {
		if path, err = docgen.CommittedReport(root); err != nil {
			fmt.Fprintf(os.Stderr, "dlock docs: %v\n", err)
			return exitSoftware
		}
	}
	r, err := report.Read(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock docs: %v\n", err)
		return exitSoftware
	}
	files, err := docgen.Documents(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock docs: %v\n", err)
		return exitSoftware
	}
	if docsCfg.check {
		ids, err := docgen.Identifiers(root)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dlock docs: %v\n", err)
			return exitSoftware
		}
		n := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "dlock docs: %v\n", err)
				return exitSoftware
			}
			for _, p := range docgen.Check(f, string(b), r, ids) {
				fmt.Println(p)
				n++
			}
		}
		if n > 0 {
			fmt.Fprintf(os.Stderr, "dlock docs: %d disagreements with %s\n", n, path)
			return 1
		}
		return exitOK
	}
	changed, err := docgen.UpdateFiles(files, r)
	for _, f := range changed {
		fmt.Fprintf(os.Stderr, "dlock docs: rewrote %s\n", f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock docs: %v\n", err)
		return exitSoftware
	}
	return exitOK
}

package docgen

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/report"
)

// Documents lists the Markdown files of the checkout at root that docgen keeps in
// step: the READMEs and docs/ (but not docs/results, which holds reports).
func Documents(root string) ([]string, error) {
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "peers", "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "results":
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(p, ".md"):
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

// CommittedReport returns the path of the committed report: report.json of the
// newest directory under docs/results (directories are named by date).
func CommittedReport(root string) (string, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "docs", "results", "*", "report.json"))
	if err != nil {
		return "", err
	}
	if len(dirs) == 0 {
		return "", fmt.Errorf("docgen: no docs/results/*/report.json under %s", root)
	}
	slices.Sort(dirs)
	return dirs[len(dirs)-1], nil
}

var goIdent = regexp.MustCompile(`\b[A-Za-z_][A-Za-z0-9_]*\b`)

// Identifiers returns every identifier that occurs in the Go files under root.
func Identifiers(root string) (map[string]bool, error) {
	ids := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, w := range goIdent.FindAll(b, -1) {
				ids[string(w)] = true
			}
		}
		return nil
	})
	return ids, err
}

// UpdateFiles renders every marker of files from r, rewriting the files that change,
// and returns those it rewrote.
func UpdateFiles(files []string, r *report.Report) ([]string, error) {
	var changed []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return changed, err
		}
		out, err := Update(string(b), r)
		if err != nil {
			return changed, fmt.Errorf("%s: %w", f, err)
		}
		if out != string(b) {
			if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
				return changed, err
			}
			changed = append(changed, f)
		}
	}
	return changed, nil
}

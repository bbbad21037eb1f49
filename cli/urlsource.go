package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// urlEnv names the environment variable a command reads its lock URL from when no
// flag gives one.
const urlEnv = "DLOCK_URL"

// urlSource is where a command takes its lock URL from: --url, --url-file, or the
// environment variable DLOCK_URL. A URL with a password shows in `ps` when given as
// --url; the other two keep it out of the command line.
type urlSource struct {
	flag, file string
}

// register declares --url and --url-file on fs. usage prints urlSourceHelp for any
// command that has them.
func (s *urlSource) register(fs *flag.FlagSet) {
	fs.StringVar(&s.flag, "url", "", "lock backend `URL`, e.g. redis://127.0.0.1:6379 (or --url-file, or $"+urlEnv+")")
	fs.StringVar(&s.file, "url-file", "", "read the lock URL from `FILE` (its first line)")
}

// urlSourceHelp says where the URL comes from; printed with the help of every
// command that takes one.
const urlSourceHelp = `
The lock URL comes from --url, or from the first line of the file --url-file names,
or else from the environment variable ` + urlEnv + `. A URL with a password (redis://user:pass@…)
shows in ps(1) when given as --url: use --url-file (a file only you can read) or
` + urlEnv + ` for those. dlock removes ` + urlEnv + ` from the environment it gives the command it
runs, and no message, log line, report or metric of dlock shows the password.
TLS, credentials and every URL parameter of each backend: docs/connecting.md.`

// resolve returns the URL from --url or --url-file (one of them at most), else from
// DLOCK_URL, which it then removes from this process's environment so that commands
// dlock starts do not inherit the credentials. Its errors never quote the URL.
func (s *urlSource) resolve() (string, error) {
	env, inEnv := os.LookupEnv(urlEnv)
	os.Unsetenv(urlEnv)
	switch {
	case s.flag != "" && s.file != "":
		return "", errors.New("give --url or --url-file, not both")
	case s.flag != "":
		return s.flag, nil
	case s.file != "":
		b, err := os.ReadFile(s.file)
		if err != nil {
			return "", fmt.Errorf("--url-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if line = strings.TrimSpace(line); line == "" {
			return "", fmt.Errorf("--url-file %s: the first line is empty", s.file)
		}
		return line, nil
	case inEnv && strings.TrimSpace(env) != "":
		return strings.TrimSpace(env), nil
	}
	return "", errors.New("--url is required (or --url-file, or $" + urlEnv + ")")
}

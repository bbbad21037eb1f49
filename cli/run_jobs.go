package cli

import (
	"flag"
	"fmt"
	"time"
)

// jobFlags are the flags of "dlock run" for a scheduled job that must run once per
// interval across a fleet: --at-least, --at-most, --skip-if-held.
type jobFlags struct {
	atLeast, atMost jobDuration
	skipIfHeld      bool
}

// maxJobDuration bounds --at-least and --at-most: a year.
const maxJobDuration = 365 * 24 * time.Hour

func (j *jobFlags) register(fs *flag.FlagSet) {
	fs.Var(&j.atLeast, "at-least", "hold the lock (renewed) until this `duration` after the command started, even if it ends sooner,\nso that a job started on many machines runs once per interval; the exit code stays the command's")
	fs.Var(&j.atMost, "at-most", "stop the command once it has run this `duration`: SIGTERM, SIGKILL after --grace; exit 124")
	fs.BoolVar(&j.skipIfHeld, "skip-if-held", false, "if another holds the lock, exit 79 at once without running the command (for cron); not with --wait")
}

// check returns a usage message for job flags that are out of bounds or do not go
// together ("" if all is well). waitSet says whether --wait was given.
func (j *jobFlags) check(waitSet bool) string {
	for _, f := range []struct {
		name string
		d    jobDuration
	}{{"--at-least", j.atLeast}, {"--at-most", j.atMost}} {
		switch {
		case !f.d.set:
		case f.d.d <= 0:
			return fmt.Sprintf("%s must be positive (a duration such as 10m), not %v", f.name, f.d.d)
		case f.d.d > maxJobDuration:
			return fmt.Sprintf("%s %v is too long: at most %v (a year)", f.name, f.d.d, maxJobDuration)
		}
	}
	switch {
	case j.atLeast.set && j.atMost.set && j.atLeast.d > j.atMost.d:
		return fmt.Sprintf("--at-least %v is longer than --at-most %v: the lock would be held after the command was stopped", j.atLeast.d, j.atMost.d)
	case j.skipIfHeld && waitSet:
		return "--skip-if-held and --wait do not go together: --skip-if-held never waits (give one)"
	}
	return ""
}

// jobDuration is the value of --at-least or --at-most: a duration, and whether it
// was given.
type jobDuration struct {
	d   time.Duration
	set bool
}

func (j *jobDuration) String() string {
	if !j.set {
		return ""
	}
	return j.d.String()
}

func (j *jobDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 10m or 1h30m")
	}
	*j = jobDuration{d: d, set: true}
	return nil
}

#!/bin/bash
# fuzz.sh runs every fuzz target of both modules (the root and lab/: go test -fuzz),
# one at a time and on one core (-parallel 1), for FUZZTIME each (default 10m), and prints a line per
# target: its package, name, exit status, time and executions. A finding is written
# by go test into the package's testdata/fuzz/<target>/ (commit it with the fix: plain
# `go test` then runs it for ever). Targets that need a server (mysqllock's FuzzKeys)
# start it as the tests do.
set -u
cd "$(dirname "$0")/.."
time=${FUZZTIME:-10m}
out=${FUZZLOG:-$(mktemp -d -t dlock-fuzz-XXXX)}
status=0
for mod in . lab; do
	pkg_targets=$(go test -C "$mod" -list '^Fuzz' ./... 2>/dev/null | awk '/^Fuzz/ {t = t " " $1} /^ok / {if (t != "") print $2 t; t = ""}')
	[ -n "$pkg_targets" ] || { echo "module $mod: no fuzz target listed (does it build?)"; status=1; continue; }
	while read -r pkg targets; do
		for t in $targets; do
			log="$out/$(echo "$pkg.$t" | tr '/' '_').log"
			start=$(date +%s)
			go test -C "$mod" "$pkg" -run '^$' -fuzz "^$t\$" -fuzztime "$time" -parallel 1 >"$log" 2>&1
			rc=$?
			[ $rc -ne 0 ] && status=1
			echo "$pkg $t rc=$rc $(( $(date +%s) - start ))s $(grep -o 'elapsed: [^,]*, execs: [0-9]*' "$log" | tail -1) log=$log"
		done
	done <<< "$pkg_targets"
done
exit $status

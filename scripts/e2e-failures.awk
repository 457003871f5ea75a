# Prints what a failed `go test -v` run says about each failure: the lines before every
# "--- FAIL", "panic:", "fatal error:" and "signal:", the last lines of a package that failed with
# no failing test (its TestMain's setup or teardown), then the list of failures.
{ tail[NR % 25] = $0 }
/^[ \t]*--- FAIL|^panic:|^fatal error:|^signal: / { show(NR - 6, NR) }
/^[ \t]*--- FAIL/ { testfailed = 1; failures[++n] = $0 }
/^FAIL\t/ {
	if (!testfailed) { print "(" $2 " failed outside its tests; its last lines:)"; show(NR - 24, NR) }
	failures[++n] = $0
}
/^(ok|FAIL)[ \t]/ { testfailed = 0; since = NR }
function show(from, to,   i) { for (i = from; i <= to; i++) if (i > since) print substr(tail[i % 25], 1, 240); print "" }
END { for (i = 1; i <= n; i++) print failures[i] }

package e2etimes

import (
	"strings"
	"testing"
)

// A -v log of two packages: top-level results go to the package summary that follows them,
// subtests and packages without tests are left out.
func TestParse(t *testing.T) {
	log := `=== RUN   TestAsRootMounts
--- PASS: TestAsRootMounts (0.52s)
PASS
ok  	example.com/m/test/machines	1.204s
ok  	example.com/m/components/spec	0.010s [no tests to run]
=== RUN   TestBoot
    boot_test.go:10: booting
=== RUN   TestBoot/workers
    --- PASS: TestBoot/workers (40.00s)
--- PASS: TestBoot (61.50s)
=== RUN   TestRoll
--- FAIL: TestRoll (300.25s)
FAIL
FAIL	example.com/m/test/e2e/booted	365.900s
`
	got, err := Parse(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "example.com/m/test/machines" || got[1].Name != "example.com/m/test/e2e/booted" {
		t.Fatalf("packages %+v", got)
	}
	booted := got[1]
	if booted.Result != "FAIL" || booted.Seconds != 365.9 || len(booted.Tests) != 2 ||
		booted.Tests[0] != (Test{Name: "TestBoot", Result: "PASS", Seconds: 61.5}) || booted.Tests[1].Result != "FAIL" {
		t.Errorf("booted %+v", booted)
	}
	table := Table(Run{Machine: "2 cores", Packages: got}, "example.com/m")
	for _, want := range []string{"| `test/e2e/booted` | 6 min 6 s | FAIL, 2 tests | TestRoll 5 min 0 s, TestBoot 1 min 2 s |", "| sum | 6 min 7 s |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}

package tier

import (
	"os"
	"regexp"
	"testing"
)

// The Makefile chooses the tiers' tests by the prefixes this package names: the fast tier skips
// them and the end-to-end tier runs them.
func TestTheMakefileChoosesByThePrefixes(t *testing.T) {
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^E2E_TIER_TESTS = (.*)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("the Makefile has no E2E_TIER_TESTS line")
	}
	if want := "^(" + RootPrefix + "|" + EtcdPrefix + ")"; string(m[1]) != want {
		t.Errorf("the Makefile's E2E_TIER_TESTS is %s; test/tier names %s", m[1], want)
	}
	for _, use := range []string{`-skip '$(E2E_TIER_TESTS)'`, `-run "$(E2E_TIER_TESTS)"`} {
		if !regexp.MustCompile(regexp.QuoteMeta(use)).Match(data) {
			t.Errorf("the Makefile does not run go test with %s", use)
		}
	}
}

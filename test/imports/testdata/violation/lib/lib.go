package lib

import "example.com/violation/harness"

// Uses crosses the rule on purpose.
var Uses = harness.Fake

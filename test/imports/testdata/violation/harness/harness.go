package harness

// Fake stands in for a test environment.
const Fake = true

package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRunAllStopsAtTheFirstFailureAndNamesIt(t *testing.T) {
	ran := 0
	count := Test{Name: "count", Run: func(context.Context) error { ran++; return nil }}
	err := RunAll(context.Background(), []Test{count, Command("ecc", "/bin/sh", "-c", "echo 'row remap pending' >&2; exit 3"), count}, time.Minute)
	var f *Failure
	if !errors.As(err, &f) || f.Test != "ecc" || !strings.Contains(err.Error(), "row remap pending") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("RunAll = %v; want the ecc test named with its exit status and output", err)
	}
	if ran != 1 {
		t.Errorf("%d tests ran after a failure", ran-1)
	}
	if err := RunAll(context.Background(), []Test{count, Command("true", "/bin/true")}, time.Minute); err != nil {
		t.Errorf("passing tests: %v", err)
	}
}

func TestEachTestIsBoundedByItsLimit(t *testing.T) {
	err := RunAll(context.Background(), []Test{Command("hang", "/bin/sleep", "30")}, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "preflight test hang failed") {
		t.Fatalf("a hung test: %v", err)
	}
}

func TestComputeNeedsTheAdvertisedProcessorsAndFinishesInTime(t *testing.T) {
	if err := Compute(1, 8<<20, time.Minute).Run(context.Background()); err != nil {
		t.Errorf("one processor, 8 MiB: %v", err)
	}
	if err := Compute(4096, 1<<20, time.Minute).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "advertises 4096") {
		t.Errorf("a node advertising more processors than it has: %v", err)
	}
	if err := Compute(1, 1<<40, time.Millisecond).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "not done within the limit") {
		t.Errorf("a test past its limit: %v", err)
	}
}

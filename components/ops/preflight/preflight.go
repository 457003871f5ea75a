// Package preflight tests a GPU node before it takes work (L36): the kubelet registers with the
// preflight taint, the node's agent (a DaemonSet pod) runs the pool's tests once when it starts
// and removes the taint from its own node on success, or sets the PreflightFailed condition that
// remediation acts on. A periodic re-test (a CronJob) puts the taint back on idle nodes and
// restarts their agents. The agent reads and writes only its own Node: no list, no watch (L07).
package preflight

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"time"
)

// Test is one check of a node; Run returns why it failed.
type Test struct {
	Name string
	Run  func(ctx context.Context) error
}

// Command is a pluggable test: the program exits 0 when the node is good (dcgmi diag -r 1 on GPU
// pools where DCGM is present, or any site-specific check). Its output is the failure's message.
func Command(name string, argv ...string) Test {
	return Test{Name: name, Run: func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, tail(out, 512))
		}
		return nil
	}}
}

// Compute is the CPU stand-in for a GPU burn test: the machine must see at least wantCPUs
// processors and hash bytes of memory on every one of them within limit.
func Compute(wantCPUs int, bytes int, limit time.Duration) Test {
	return Test{Name: "compute", Run: func(ctx context.Context) error {
		if got := runtime.NumCPU(); got < wantCPUs {
			return fmt.Errorf("%d processors online, the node advertises %d", got, wantCPUs)
		}
		ctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		errs := make(chan error, wantCPUs)
		for range max(wantCPUs, 1) {
			go func() { errs <- hashFor(ctx, bytes) }()
		}
		var all []error
		for range max(wantCPUs, 1) {
			all = append(all, <-errs)
		}
		if err := errors.Join(all...); err != nil {
			return fmt.Errorf("hashing %d MiB on each of %d processors: %w", bytes>>20, wantCPUs, err)
		}
		return nil
	}}
}

// hashFor hashes bytes of memory in 1 MiB blocks, giving up when ctx ends.
func hashFor(ctx context.Context, bytes int) error {
	block := make([]byte, 1<<20)
	h := sha256.New()
	for done := 0; done < bytes; done += len(block) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("not done within the limit: %w", err)
		}
		block[0] = byte(done)
		h.Write(block)
	}
	return nil
}

// Failure is the first failed test of a pass.
type Failure struct {
	Test string
	Err  error
}

func (f *Failure) Error() string { return fmt.Sprintf("preflight test %s failed: %v", f.Test, f.Err) }

// RunAll runs the tests in order, each within perTest, and stops at the first failure.
func RunAll(ctx context.Context, tests []Test, perTest time.Duration) error {
	for _, t := range tests {
		tctx, cancel := context.WithTimeout(ctx, perTest)
		err := t.Run(tctx)
		cancel()
		if err != nil {
			return &Failure{Test: t.Name, Err: err}
		}
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

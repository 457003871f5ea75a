package machines

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Proc is one process the rehearsal started, as listed in endpoints.json.
type Proc struct {
	Role    string `json:"role"`
	Machine string `json:"machine"`
	// Name is the unit (etcd, kube-apiserver...) or "lb", "kwok".
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// URL is where clients reach it; CA, Cert and Key are the files a client needs.
	URL     string   `json:"url,omitempty"`
	CA      string   `json:"ca,omitempty"`
	Cert    string   `json:"cert,omitempty"`
	Key     string   `json:"key,omitempty"`
	Log     string   `json:"log"`
	Command []string `json:"command"`

	exited   chan struct{}
	waitErr  error
	stopping atomic.Bool
}

// Exited is closed once the process has exited; Err is then how it ended.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (nil for a clean exit), once Exited is closed.
func (p *Proc) Err() error { return p.waitErr }

// Stopping reports whether a Stop has begun.
func (p *Proc) Stopping() bool { return p.stopping.Load() }

// StartProcess runs argv in its own session, so a stop reaches its children too, appending output to
// log. It dies with the rehearsal that started it, even one killed without cleaning up.
func StartProcess(argv, env []string, dir, log string) (*Proc, error) {
	return SpawnProcess(argv, env, dir, log, true)
}

// SpawnProcess is StartProcess; dieWithParent false leaves the process running after this one exits, for what
// `make boot` leaves behind.
func SpawnProcess(argv, env []string, dir, log string, dieWithParent bool) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	fmt.Fprintf(out, "---- %s started: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if dieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &Proc{PID: cmd.Process.Pid, Log: log, Command: argv, exited: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Alive reports whether the process still runs and is the one that was started.
func (p *Proc) Alive() bool {
	if p.exited != nil {
		select {
		case <-p.exited:
			return false
		default:
			return true
		}
	}
	// A process of an earlier `rehearse up`: check the pid still runs our binary.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil || len(p.Command) == 0 {
		return false
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if fields := strings.Fields(string(stat)); len(fields) > 2 && fields[2] == "Z" {
		return false
	}
	// The binary, or a script its interpreter runs (Azurite under node).
	args := strings.Split(string(cmdline), "\x00")
	return args[0] == p.Command[0] || len(args) > 1 && args[1] == p.Command[0]
}

// Stop signals the process's whole session (scripts' children too) and waits for it to exit,
// killing it if it has not within grace.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) error {
	p.stopping.Store(true)
	if !p.Alive() {
		return nil
	}
	_ = syscall.Kill(-p.PID, sig)
	if p.WaitExit(grace) {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	if p.WaitExit(5 * time.Second) {
		return nil
	}
	return fmt.Errorf("pid %d (%s on %s) survived SIGKILL", p.PID, p.Name, p.Machine)
}

// WaitExit reports whether the process exited within timeout.
func (p *Proc) WaitExit(timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !p.Alive() {
			return true
		}
	}
	return !p.Alive()
}

// Failed reports whether the process ended as systemd's Restart=on-failure counts a failure:
// a non-zero exit, or a signal other than a clean-stop one.
func (p *Proc) Failed() bool {
	var exit *exec.ExitError
	if !errors.As(p.waitErr, &exit) {
		return p.waitErr != nil
	}
	status, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !status.Signaled() {
		return true
	}
	switch status.Signal() {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE:
		return false
	}
	return true
}

// WriteEndpoints records the running processes atomically.
func WriteEndpoints(path string, procs []*Proc) error {
	data, err := json.MarshalIndent(procs, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readEndpoints loads the processes of a rehearsal directory.
func readEndpoints(path string) ([]*Proc, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var procs []*Proc
	if err := json.Unmarshal(data, &procs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return procs, nil
}

// WriteFile writes content to path, making its directories.
func WriteFile(path, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), mode)
}

// StopProcesses stops every process a rehearsal in dir started, even one run by another command.
func StopProcesses(dir string, progress io.Writer) error {
	path := filepath.Join(dir, "endpoints.json")
	procs, err := readEndpoints(path)
	if err != nil {
		return err
	}
	var alive []*Proc
	for _, p := range procs {
		if p.Alive() {
			alive = append(alive, p)
		}
	}
	if err := StopAll(alive); err != nil {
		return err
	}
	if progress != nil && len(alive) > 0 {
		fmt.Fprintf(progress, "==> stopped %d processes of the rehearsal in %s\n", len(alive), dir)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// StopAll stops processes in parallel: a clean SIGTERM, SIGKILL after 10 s.
func StopAll(procs []*Proc) error {
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Stop(syscall.SIGTERM, 10*time.Second) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

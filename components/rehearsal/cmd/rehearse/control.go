package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/clusterforge/clusterforge/components/rehearsal"
)

// request is one operation the supervisor carries out on its machines.
type request struct {
	Op       string `json:"op"`
	Snapshot string `json:"snapshot,omitempty"`
}

const okLine, errorPrefix = "OK", "ERROR: "

func controlSocket(dir string) string { return filepath.Join(dir, "control.sock") }

// errNotRunning: no supervisor answers on the control socket.
var errNotRunning = errors.New("no rehearsal runs here: start it with make rehearse")

// control sends a request to the running rehearsal and relays its progress.
func control(dir string, req request) error {
	conn, err := net.Dial("unix", controlSocket(dir))
	if err != nil {
		return fmt.Errorf("%s (%v): %w", dir, err, errNotRunning)
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return err
	}
	lines := bufio.NewScanner(conn)
	for lines.Scan() {
		switch line := lines.Text(); {
		case line == okLine:
			return nil
		case strings.HasPrefix(line, errorPrefix):
			return errors.New(strings.TrimPrefix(line, errorPrefix))
		default:
			fmt.Println(line)
		}
	}
	return fmt.Errorf("the rehearsal's supervisor hung up (see %s)", filepath.Join(dir, "rehearse.log"))
}

// listenControl serves requests on the control socket, one at a time, until ctx ends.
func listenControl(ctx context.Context, dir string, r *rehearsal.Rehearsal) (net.Listener, error) {
	_ = os.Remove(controlSocket(dir))
	ln, err := net.Listen("unix", controlSocket(dir))
	if err != nil {
		return nil, err
	}
	var one sync.Mutex
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				one.Lock()
				defer one.Unlock()
				var req request
				if err := json.NewDecoder(conn).Decode(&req); err != nil {
					fmt.Fprintf(conn, "%s%v\n", errorPrefix, err)
					return
				}
				r.SetProgress(io.MultiWriter(conn, os.Stdout))
				defer r.SetProgress(os.Stdout)
				if err := serveRequest(ctx, r, req, conn); err != nil {
					fmt.Fprintf(conn, "%s%s\n", errorPrefix, strings.ReplaceAll(err.Error(), "\n", " | "))
					return
				}
				fmt.Fprintln(conn, okLine)
			}()
		}
	}()
	return ln, nil
}

func serveRequest(ctx context.Context, r *rehearsal.Rehearsal, req request, out io.Writer) error {
	switch req.Op {
	case "etcd-backup":
		snap, err := r.BackupEtcd(ctx)
		if err == nil {
			fmt.Fprintf(out, "==> snapshot %s: revision %d, %d bytes, sha256 %s, verified\n", snap.Name, snap.Revision, snap.Size, snap.SHA256)
		}
		return err
	case "etcd-restore":
		snap, err := r.RestoreEtcd(ctx, req.Snapshot)
		if err == nil {
			fmt.Fprintf(out, "==> restored from %s (revision %d); the API is healthy\n", snap.Name, snap.Revision)
		}
		return err
	}
	return fmt.Errorf("unknown operation %q", req.Op)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines/processes"
)

// listenControl serves requests on the control socket, one at a time, until ctx ends.
func listenControl(ctx context.Context, dir string, r *processes.Rehearsal) (net.Listener, error) {
	_ = os.Remove(processes.ControlSocket(dir))
	ln, err := net.Listen("unix", processes.ControlSocket(dir))
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
				var req processes.Request
				if err := json.NewDecoder(conn).Decode(&req); err != nil {
					fmt.Fprintf(conn, "%s%v\n", processes.ErrorPrefix, err)
					return
				}
				r.SetProgress(io.MultiWriter(conn, os.Stdout))
				defer r.SetProgress(os.Stdout)
				if err := serveRequest(ctx, r, req, conn); err != nil {
					fmt.Fprintf(conn, "%s%s\n", processes.ErrorPrefix, strings.ReplaceAll(err.Error(), "\n", " | "))
					return
				}
				fmt.Fprintln(conn, processes.OKLine)
			}()
		}
	}()
	return ln, nil
}

func serveRequest(ctx context.Context, r *processes.Rehearsal, req processes.Request, out io.Writer) error {
	switch req.Op {
	case "etcd-backup":
		snap, err := r.BackupEtcd(ctx)
		if err == nil {
			fmt.Fprintf(out, "==> snapshot %s: revision %d, %d bytes, sha256 %s, verified\n", snap.Name, snap.Revision, snap.Size, snap.SHA256)
		}
		return err
	case "roll":
		desired, err := spec.LoadStack(req.Stack)
		if err != nil {
			return err
		}
		_, err = r.Roll(ctx, desired, req.Renew, out)
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

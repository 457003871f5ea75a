package arm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// RemoteMachines are machines another process holds (ServeMachines), reached over its unix
// socket: the stand-in runs apart from the process that booted the machines.
type RemoteMachines struct{ Socket string }

// machineRequest is one call over the socket.
type machineRequest struct {
	Op         string   `json:"op"`
	Instance   Instance `json:"instance"`
	ResourceID string   `json:"resourceId,omitempty"`
	Script     []string `json:"script,omitempty"`
}

type machineAnswer struct {
	Address string `json:"address,omitempty"`
	Stdout  string `json:"stdout,omitempty"`
	Stderr  string `json:"stderr,omitempty"`
	Error   string `json:"error,omitempty"`
}

func (m RemoteMachines) call(ctx context.Context, req machineRequest) (machineAnswer, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return machineAnswer{}, err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", m.Socket)
	}}}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://machines/", strings.NewReader(string(body)))
	if err != nil {
		return machineAnswer{}, err
	}
	resp, err := client.Do(r)
	if err != nil {
		return machineAnswer{}, fmt.Errorf("the machines' host: %w", err)
	}
	defer resp.Body.Close()
	var a machineAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return machineAnswer{}, fmt.Errorf("the machines' host answered %s: %w", resp.Status, err)
	}
	if a.Error != "" {
		return a, errors.New(a.Error)
	}
	return a, nil
}

func (m RemoteMachines) Create(ctx context.Context, in Instance) (string, error) {
	a, err := m.call(ctx, machineRequest{Op: OpCreate, Instance: in})
	return a.Address, err
}

func (m RemoteMachines) Delete(ctx context.Context, in Instance) error {
	_, err := m.call(ctx, machineRequest{Op: OpDelete, Instance: in})
	return err
}

func (m RemoteMachines) Reimage(ctx context.Context, in Instance) error {
	_, err := m.call(ctx, machineRequest{Op: OpReimage, Instance: in})
	return err
}

func (m RemoteMachines) RunCommand(ctx context.Context, resourceID string, script []string) (string, string, error) {
	a, err := m.call(ctx, machineRequest{Op: OpRunCommand, ResourceID: resourceID, Script: script})
	return a.Stdout, a.Stderr, err
}

// ServeMachines serves machines to RemoteMachines on ln until it is closed.
func ServeMachines(ln net.Listener, machines Machines) error {
	err := http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req machineRequest
		data, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(data, &req)
		}
		var a machineAnswer
		if err == nil {
			switch req.Op {
			case OpCreate:
				a.Address, err = machines.Create(r.Context(), req.Instance)
			case OpDelete:
				err = machines.Delete(r.Context(), req.Instance)
			case OpReimage:
				err = machines.Reimage(r.Context(), req.Instance)
			case OpRunCommand:
				a.Stdout, a.Stderr, err = machines.RunCommand(r.Context(), req.ResourceID, req.Script)
			default:
				err = fmt.Errorf("no operation %q on machines", req.Op)
			}
		}
		if err != nil {
			a.Error = err.Error()
		}
		writeJSON(w, http.StatusOK, a)
	}))
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

package processes

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
)

// Request is one operation the supervisor carries out on its machines.
type Request struct {
	Op       string `json:"op"`
	Snapshot string `json:"snapshot,omitempty"`
	// Stack is the stack file a roll converges on; Renew re-issues every leaf certificate.
	Stack string `json:"stack,omitempty"`
	Renew bool   `json:"renew,omitempty"`
}

// OKLine ends a request that succeeded; ErrorPrefix starts the line that ends one that failed.
const OKLine, ErrorPrefix = "OK", "ERROR: "

// ControlSocket is where a running rehearsal's supervisor takes requests.
func ControlSocket(dir string) string { return filepath.Join(dir, "control.sock") }

// ErrNotRunning: no supervisor answers on the control socket.
var ErrNotRunning = errors.New("no rehearsal runs here: start it with make rehearse")

// Control sends a request to the running rehearsal and relays its progress.
func Control(dir string, req Request) error {
	conn, err := net.Dial("unix", ControlSocket(dir))
	if err != nil {
		return fmt.Errorf("%s (%v): %w", dir, err, ErrNotRunning)
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return err
	}
	lines := bufio.NewScanner(conn)
	for lines.Scan() {
		switch line := lines.Text(); {
		case line == OKLine:
			return nil
		case strings.HasPrefix(line, ErrorPrefix):
			return errors.New(strings.TrimPrefix(line, ErrorPrefix))
		default:
			fmt.Println(line)
		}
	}
	return fmt.Errorf("the rehearsal's supervisor hung up (see %s)", filepath.Join(dir, "rehearse.log"))
}

package nspawn

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/test/machines"
)

// StartMachine boots a stopped machine and waits until systemd has finished starting its units.
func (b *Booted) StartMachine(ctx context.Context, name string) error {
	if err := b.Start(ctx, name); err != nil {
		return err
	}
	return machines.Poll(ctx, 3*time.Minute, name+" boot", func(ctx context.Context) error {
		out, _ := b.Exec(ctx, name, "systemctl", "is-system-running")
		switch state := strings.TrimSpace(out); state {
		case "running", "degraded":
			return nil
		default:
			return fmt.Errorf("systemd is %q", state)
		}
	})
}

// UnitLog is the unit's journal since the machine booted.
func (b *Booted) UnitLog(ctx context.Context, name, unit string) (string, error) {
	return b.Exec(ctx, name, "journalctl", "--boot", "--unit", unit, "--no-pager", "--output=cat")
}

// LeaseMachine reads the lease's holder, "<host name>_<id>": booted machines have their own names.
func (b *Booted) LeaseMachine(ctx context.Context, lease string) (string, error) {
	cs, err := b.Clientset()
	if err != nil {
		return "", err
	}
	host, err := roll.LeaseHolderHost(ctx, cs, lease)
	if err != nil {
		return "", err
	}
	if _, err := b.Machine(host); err != nil {
		return "", fmt.Errorf("lease %s is held by %q, no machine of this boot", lease, host)
	}
	return host, nil
}

package roll

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// RenewBefore is how long before expiry a leaf certificate is due: the roll renews it and the
// CertificateExpiringSoon alert fires.
const RenewBefore = spec.CertificateRenewBefore

// Machine is what one machine reports it runs, beside what the spec asks of it.
type Machine struct {
	Name, Role string
	// Runs and Want are the component version it serves and the one the spec pins.
	Runs, Want string
	// CertificateExpires is when its serving certificate expires; zero for workers, whose
	// kubelets renew their own (serverTLSBootstrap).
	CertificateExpires time.Time
	// OldModel is set when the machine does not run its scale set's latest model (Azure's
	// latestModelApplied): a new image or user-data has not reached it.
	OldModel bool
	// Problem is why it could not report, if it could not.
	Problem string
}

// Stale reports whether the machine runs other than the spec asks.
func (m Machine) Stale() bool { return m.Problem != "" || m.Runs != m.Want || m.OldModel }

// ModelReporter is an Observer that knows which machines run their scale set's latest model.
type ModelReporter interface {
	// Models maps machine (and node) names to whether they run the latest model.
	Models(ctx context.Context) (map[string]bool, error)
}

// Report asks every machine what it runs: each etcd member its server version, each apiserver
// its /version, each node its kubelet version, and the control plane its serving certificate.
func Report(ctx context.Context, o Observer, desired *spec.Cluster) ([]Machine, error) {
	inv, err := o.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	var out []Machine
	for _, role := range []string{spec.RoleEtcdMain, spec.RoleEtcdEvents} {
		cli, err := o.EtcdClient(role)
		if err != nil {
			return nil, err
		}
		list, err := cli.MemberList(ctx)
		if err != nil {
			cli.Close()
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		urls := map[string]string{}
		for _, m := range list.Members {
			if len(m.ClientURLs) > 0 {
				urls[m.Name] = m.ClientURLs[0]
			}
		}
		for _, name := range inv[role] {
			m := Machine{Name: name, Role: role, Want: strings.TrimPrefix(desired.Versions.Etcd, "v")}
			if st, err := cli.Status(ctx, urls[name]); err != nil {
				m.Problem = err.Error()
			} else {
				m.Runs = st.Version
			}
			out = append(out, withCertificate(ctx, o, m))
		}
		cli.Close()
	}
	for _, name := range inv[spec.RoleAPIServer] {
		m := Machine{Name: name, Role: spec.RoleAPIServer, Want: desired.Versions.Kubernetes}
		if m.Runs, err = o.APIServerVersion(ctx, name); err != nil {
			m.Problem = err.Error()
		}
		out = append(out, withCertificate(ctx, o, m))
	}
	nodes, err := listNodes(ctx, o)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		out = append(out, Machine{Name: n.Name, Role: spec.WorkerRole(n.Labels[wellknown.PoolLabel]),
			Runs: n.Status.NodeInfo.KubeletVersion, Want: desired.Versions.Kubelet})
	}
	if mr, ok := o.(ModelReporter); ok {
		models, err := mr.Models(ctx)
		if err != nil {
			return nil, err
		}
		for i := range out {
			if latest, known := models[out[i].Name]; known {
				out[i].OldModel = !latest
			}
		}
	}
	return out, nil
}

func withCertificate(ctx context.Context, o Observer, m Machine) Machine {
	cert, err := o.ServingCertificate(ctx, m.Name)
	if err == nil {
		m.CertificateExpires = cert.NotAfter
	} else if m.Problem == "" {
		m.Problem = err.Error()
	}
	return m
}

// Due returns the renewal change when a machine's certificate expires within RenewBefore of now.
func Due(machines []Machine, desired *spec.Cluster, now time.Time) (change.Change, bool) {
	for _, m := range machines {
		if !m.CertificateExpires.IsZero() && m.CertificateExpires.Sub(now) < RenewBefore {
			return change.Renewal(desired, fmt.Sprintf("%s's certificate expires %s", m.Name, m.CertificateExpires.Format(time.DateOnly))), true
		}
	}
	return change.Change{}, false
}

// PrintMachines writes the report as a table, stale machines marked.
func PrintMachines(w io.Writer, machines []Machine, now time.Time) {
	fmt.Fprintf(w, "%-28s %-12s %-10s %-10s %-12s %s\n", "MACHINE", "ROLE", "RUNS", "WANT", "CERT EXPIRES", "STATE")
	for _, m := range machines {
		state, expires := "current", "-"
		if !m.CertificateExpires.IsZero() {
			expires = m.CertificateExpires.Format(time.DateOnly)
			if m.CertificateExpires.Sub(now) < RenewBefore {
				state = "certificate due"
			}
		}
		switch {
		case m.Problem != "":
			state = "unreachable: " + m.Problem
		case m.Runs != m.Want:
			state = "stale"
		case m.OldModel:
			state = "stale: not on its scale set's latest model"
		}
		fmt.Fprintf(w, "%-28s %-12s %-10s %-10s %-12s %s\n", m.Name, m.Role, m.Runs, m.Want, expires, state)
	}
}

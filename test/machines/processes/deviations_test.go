package processes

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

func TestOwnLoopbackReplacesWholeAddressesOnly(t *testing.T) {
	for in, want := range map[string]string{
		"https://127.0.0.1:6443":     "https://127.3.1.20:6443",
		"--bind-address=0.0.0.0":     "--bind-address=127.3.1.20",
		"--bind-address=127.0.0.1":   "--bind-address=127.3.1.20",
		"10.0.0.0/16":                "10.0.0.0/16",
		"127.0.0.10":                 "127.0.0.10",
		"--service-cidr=100.0.0.0/8": "--service-cidr=100.0.0.0/8",
	} {
		if got := ownLoopback(in, "127.3.1.20"); got != want {
			t.Errorf("ownLoopback(%q) = %q, want %q", in, got, want)
		}
	}
}

func devLayout(t *testing.T) *Layout {
	t.Helper()
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", "stacks", "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewLayout(c, machines.Options{Dir: t.TempDir(), Tools: t.TempDir(), Base: 3})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLayoutMapsMachinesOntoLoopbackKeepingOffsets(t *testing.T) {
	p := devLayout(t)
	if got := p.Cluster.Network.APIServerIP; got != "127.3.1.10" {
		t.Errorf("load balancer address %s, want the rendered offset .10 in 127.3.1.0/24", got)
	}
	want := map[string]string{
		"cf-dev-etcd-main-0": "127.3.2.10", "cf-dev-etcd-main-4": "127.3.2.14",
		"cf-dev-etcd-events-0": "127.3.2.30", "cf-dev-apiserver-1": "127.3.1.21",
	}
	for name, ip := range want {
		in, err := p.Instance(name)
		if err != nil || in.IP != ip {
			t.Errorf("%s at %q (%v), want %s", name, in.IP, err, ip)
		}
	}
	if n := len(p.Of(spec.RoleEtcdMain)) + len(p.Of(spec.RoleEtcdEvents)) + len(p.Of(spec.RoleAPIServer)); n != len(p.Instances) || n != 5+3+2 {
		t.Errorf("%d machines planned, want 5 etcd-main, 3 etcd-events and 2 apiservers", len(p.Instances))
	}
}

// The apiserver's command is its rendered ExecStart with only the listed deviations applied.
func TestAPIServerCommandIsTheRenderedUnit(t *testing.T) {
	p := devLayout(t)
	in := p.Of(spec.RoleAPIServer)[0]
	if err := p.materialize(in); err != nil {
		t.Fatal(err)
	}
	var argv []string
	for _, u := range in.Machine.Units {
		if u.Name != "kube-apiserver.service" {
			continue
		}
		uc, err := parseUnit(u)
		if err != nil {
			t.Fatal(err)
		}
		if uc.Restart != "always" || uc.Oneshot || len(uc.envFiles) != 1 {
			t.Errorf("parsed unit %+v: want a restarting service with one EnvironmentFile", uc)
		}
		if argv, _, err = p.unitArgv(in, uc); err != nil {
			t.Fatal(err)
		}
	}
	root := p.Root(in.Name)
	for _, want := range []string{
		filepath.Join(root, "usr/local/bin/kube-apiserver"),
		"--advertise-address=" + in.IP,    // ${NODE_IP} from node.env
		"--bind-address=" + in.IP,         // deviation "localhost"
		"--endpoint-reconciler-type=none", // deviation "endpoint reconciler"
		"--audit-policy-file=" + filepath.Join(root, "etc/kubernetes/audit-policy.yaml"),
	} {
		if !slices.Contains(argv, want) {
			t.Errorf("kube-apiserver argv lacks %s", want)
		}
	}
	for _, arg := range argv {
		if strings.Contains(arg, "=/") && !strings.Contains(arg, "="+root) && !strings.HasPrefix(arg, "--etcd-servers-overrides=/events#") {
			t.Errorf("argument %s points outside the machine root", arg)
		}
	}
}

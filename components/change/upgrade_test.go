package change

import (
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

// A cluster built by an older clusterforge: Kubernetes 1.34, containerd 1.7, etcd 3.6.4.
var built134 = spec.Versions{Kubernetes: "v1.34.2", Kubelet: "v1.34.2", Etcd: "v3.6.4", Containerd: "v1.7.28",
	Runc: "v1.3.0", Crictl: "v1.34.0", AzureCNI: "v1.6.21"}

// pinned is what a stack of this release resolves to.
var pinned = spec.Versions{Kubernetes: spec.DefaultKubernetesVersion, Kubelet: spec.DefaultKubernetesVersion,
	Etcd: spec.DefaultEtcdVersion, Containerd: spec.DefaultContainerdVersion, Runc: spec.DefaultRuncVersion,
	Crictl: spec.DefaultCrictlVersion, AzureCNI: spec.DefaultAzureCNIVersion}

func TestUpgradePath(t *testing.T) {
	held := "versions.kubelet: v1.34.2, versions.containerd: v1.7.28, versions.runc: v1.3.0, versions.crictl: v1.34.0, versions.azureCNI: v1.6.21"
	release := "remove versions.kubelet, remove versions.containerd, remove versions.runc, remove versions.crictl, remove versions.azureCNI (rolls workers)"
	etcd, etcdAndAPI := "(rolls etcd-events, etcd-main)", "(rolls etcd-events, etcd-main, apiserver)"
	for _, tc := range []struct {
		name             string
		applied, desired spec.Versions
		want             []string
		err              string
	}{
		{name: "1.34 to the pinned 1.37: etcd to a 3.6 that 3.7 upgrades from, then 3.7; three control-plane hops; one kubelet hop",
			applied: built134, desired: pinned, want: []string{
				"versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.HopKubernetesVersion + ", " + held + " " + etcdAndAPI,
				"versions.etcd: " + spec.DefaultEtcdVersion + ", versions.kubernetes: " + spec.PreviousKubernetesVersion + " " + etcdAndAPI,
				"versions.kubernetes: " + spec.DefaultKubernetesVersion + " (rolls apiserver)",
				release}},
		{name: "etcd from a 3.6 that 3.7 does not upgrade from, one control-plane minor: etcd first",
			applied: with(pinned, spec.PreviousKubernetesVersion, "v3.6.4"), desired: pinned, want: []string{
				"versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.PreviousKubernetesVersion + " " + etcd,
				"versions.etcd: " + spec.DefaultEtcdVersion + ", versions.kubernetes: " + spec.DefaultKubernetesVersion + " (rolls etcd-events, etcd-main, apiserver, workers)"}},
		{name: "one minor and a patch of etcd: one apply", applied: with(pinned, spec.PreviousKubernetesVersion, spec.PreviousEtcdVersion), desired: pinned},
		{name: "a kubelet four minors behind moves before the control plane leaves it",
			applied: with(built134, "v1.33.4", "v3.6.16"), desired: pinned,
			err: "no kubernetes v1.34 release is built by this clusterforge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hops, err := UpgradePath(tc.applied, tc.desired)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hops {
				got = append(got, h.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("hops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// with is v on Kubernetes k (control plane and kubelets) and etcd e.
func with(v spec.Versions, k, e string) spec.Versions {
	v.Kubernetes, v.Kubelet, v.Etcd = k, k, e
	return v
}

// A stack that skips control-plane minors is refused on versions.kubernetes, naming every hop.
func TestSkipIsRefusedWithTheHops(t *testing.T) {
	base := applied(t)
	base.Versions = built134
	desired := copyOf(t, base)
	desired.Versions = pinned
	_, err := NewPlan(base, desired, Inventory{})
	if err == nil {
		t.Fatal("planned a skip of two control-plane minors")
	}
	for _, want := range []string{"versions.kubernetes (v1.34.2 -> " + spec.DefaultKubernetesVersion + "): Kubernetes upgrades one minor at a time",
		"versions.etcd (v3.6.4 -> " + spec.DefaultEtcdVersion + "): etcd v3.7 upgrades only from v3.6.11 or later; see the hops of versions.kubernetes",
		"1. versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.HopKubernetesVersion, "4. remove versions.kubelet"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q:\n%v", want, err)
		}
	}
}

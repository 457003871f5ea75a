package change

import (
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

// A cluster built by an older clusterforge: Kubernetes 1.34, containerd 1.7, etcd 3.6.4.
var built134 = spec.Versions{Kubernetes: "v1.34.2", Kubelet: "v1.34.2", Etcd: "v3.6.4", Containerd: "v1.7.28",
	Runc: "v1.3.0", Crictl: "v1.34.0", AzureCNI: "v1.6.21", PauseImage: "registry.k8s.io/pause:3.10.1"}

// pinned is what a stack of this release resolves to.
var pinned = spec.Versions{Kubernetes: spec.DefaultKubernetesVersion, Kubelet: spec.DefaultKubernetesVersion,
	Etcd: spec.DefaultEtcdVersion, Containerd: spec.DefaultContainerdVersion, Runc: spec.DefaultRuncVersion,
	Crictl: spec.DefaultCrictlVersion, AzureCNI: spec.DefaultAzureCNIVersion, PauseImage: spec.DefaultPauseImage}

func TestUpgradePath(t *testing.T) {
	held := "versions.kubelet: v1.34.2, versions.containerd: v1.7.28, versions.runc: v1.3.0, versions.crictl: v1.34.0, versions.azureCNI: v1.6.21, versions.pauseImage: registry.k8s.io/pause:3.10.1"
	release := "remove versions.kubelet (its default " + spec.DefaultKubernetesVersion + "), remove versions.containerd (its default " + spec.DefaultContainerdVersion +
		"), remove versions.runc (its default " + spec.DefaultRuncVersion + "), remove versions.crictl (its default " + spec.DefaultCrictlVersion +
		"), remove versions.azureCNI (its default " + spec.DefaultAzureCNIVersion + "), remove versions.pauseImage (its default " + spec.DefaultPauseImage + ") (rolls workers)"
	etcd, etcdAndAPI := "(rolls etcd-events, etcd-main)", "(rolls etcd-events, etcd-main, apiserver)"
	heldAt136 := pinned
	heldAt136.Kubelet = spec.PreviousKubernetesVersion
	for _, tc := range []struct {
		name             string
		applied, desired spec.Versions
		want             []string
		err              string
	}{
		{name: "1.34 to the pinned 1.37: etcd to a 3.6 that 3.7 upgrades from, then 3.7; three control-plane hops; one kubelet hop",
			applied: built134, desired: pinned, want: []string{
				"versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.HopKubernetesVersion + ", " + held + " " + etcdAndAPI,
				"remove versions.etcd (its default " + spec.DefaultEtcdVersion + "), versions.kubernetes: " + spec.PreviousKubernetesVersion + " " + etcdAndAPI,
				"remove versions.kubernetes (its default " + spec.DefaultKubernetesVersion + ") (rolls apiserver)",
				release}},
		{name: "the desired stack holds its kubelet: the last hop sets it, and moves the rest of the image",
			applied: built134, desired: heldAt136, want: []string{
				"versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.HopKubernetesVersion + ", " + held + " " + etcdAndAPI,
				"remove versions.etcd (its default " + spec.DefaultEtcdVersion + "), versions.kubernetes: " + spec.PreviousKubernetesVersion + " " + etcdAndAPI,
				"remove versions.kubernetes (its default " + spec.DefaultKubernetesVersion + ") (rolls apiserver)",
				"versions.kubelet: " + spec.PreviousKubernetesVersion + strings.TrimPrefix(release, "remove versions.kubelet (its default "+spec.DefaultKubernetesVersion+")")}},
		{name: "kubelets that would trail by four minors move to the control plane's release first, and stay there",
			applied: withKubelet(with(built134, spec.HopKubernetesVersion, spec.PreviousEtcdVersion), "v1.32.9"), desired: pinned, want: []string{
				"versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.HopKubernetesVersion + ", versions.kubelet: " + spec.HopKubernetesVersion +
					", remove versions.containerd (its default " + spec.DefaultContainerdVersion + "), remove versions.runc (its default " + spec.DefaultRuncVersion +
					"), remove versions.crictl (its default " + spec.DefaultCrictlVersion + "), remove versions.azureCNI (its default " + spec.DefaultAzureCNIVersion +
					"), remove versions.pauseImage (its default " + spec.DefaultPauseImage + ") (rolls workers)",
				"remove versions.etcd (its default " + spec.DefaultEtcdVersion + "), versions.kubernetes: " + spec.PreviousKubernetesVersion + " " + etcdAndAPI,
				"remove versions.kubernetes (its default " + spec.DefaultKubernetesVersion + ") (rolls apiserver)",
				"remove versions.kubelet (its default " + spec.DefaultKubernetesVersion + ") (rolls workers)"}},
		{name: "etcd from a 3.6 that 3.7 does not upgrade from, one control-plane minor: etcd first",
			applied: with(pinned, spec.PreviousKubernetesVersion, "v3.6.4"), desired: pinned, want: []string{
				"versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.PreviousKubernetesVersion + ", versions.kubelet: " + spec.PreviousKubernetesVersion + " " + etcd,
				"remove versions.etcd (its default " + spec.DefaultEtcdVersion + "), remove versions.kubernetes (its default " + spec.DefaultKubernetesVersion +
					"), remove versions.kubelet (its default " + spec.DefaultKubernetesVersion + ") (rolls etcd-events, etcd-main, apiserver, workers)"}},
		{name: "one minor and a patch of etcd: one apply", applied: with(pinned, spec.PreviousKubernetesVersion, spec.PreviousEtcdVersion), desired: pinned},
		{name: "a downgrade: no path (the rules refuse it)", applied: pinned, desired: with(pinned, spec.HopKubernetesVersion, spec.DefaultEtcdVersion)},
		{name: "a minor nothing here builds", applied: with(built134, "v1.33.4", "v3.6.16"), desired: pinned,
			err: "no kubernetes v1.34 release is built by this clusterforge"},
		{name: "etcd below the release 3.6 upgrades from, with no 3.5 built here", applied: with(pinned, spec.PreviousKubernetesVersion, "v3.5.10"), desired: pinned,
			err: "no etcd v3.5 release is built by this clusterforge"},
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

// withKubelet is v with its workers on kubelet k.
func withKubelet(v spec.Versions, k string) spec.Versions {
	v.Kubelet = k
	return v
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
		"1. versions.etcd: " + spec.PreviousEtcdVersion + ", versions.kubernetes: " + spec.HopKubernetesVersion, "4. remove versions.kubelet",
		"versions.pauseImage: registry.k8s.io/pause:3.10.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q:\n%v", want, err)
		}
	}
}

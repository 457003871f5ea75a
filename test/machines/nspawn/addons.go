package nspawn

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/infra/handoff"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/pulumilocal"
)

// applyAddons applies every add-on once the workers are Ready, as on Azure: `pulumi up` of the
// cluster services stack (project clusterforge-services) with the engine built here, on a local
// backend (Pulumi), reading the handoff from the infrastructure stack's stand-in. The boot's
// deviations to the add-ons travel in the handoff as patches (Adjust). stackFile is the services
// stack's config: a stack file. It returns once CoreDNS, Prometheus,
// clusterforge-ops and the node agents (node-exporter, clusterforge-ops-agent) run.
func (b *Booted) applyAddons(ctx context.Context, stackFile []byte) error {
	ca, err := b.entraCA()
	if err != nil {
		return err
	}
	if err := b.Apply(ctx, ca); err != nil {
		return err
	}
	h, err := b.Handoff()
	if err != nil {
		return err
	}
	be, err := b.Pulumi()
	if err != nil {
		return err
	}
	if err := be.Setup(ctx); err != nil {
		return err
	}
	log := b.pulumiLog()
	defer log.Close()
	if err := be.ExportInfrastructure(ctx, h, log); err != nil {
		return fmt.Errorf("the infrastructure stack's stand-in: %w", err)
	}
	if err := be.WriteServices(stackFile); err != nil {
		return err
	}
	if err := be.Pulumi(ctx, log, "stack", "select", "--create", "--secrets-provider", "passphrase"); err != nil {
		return err
	}
	if err := be.Pulumi(ctx, log, "up", "--yes", "--skip-preview", "--suppress-progress"); err != nil {
		return err
	}
	if err := b.WaitAddons(ctx); err != nil {
		return err
	}
	b.logf("add-ons applied by `pulumi up` of the services stack (log: %s); CoreDNS, Prometheus, clusterforge-ops and the node agents run from the preloaded images (CPU requests × %.2f)", log.Name(), b.cpuShare())
	return nil
}

// PulumiDir is the local Pulumi backend of the boot in dir: the services stack and the
// infrastructure's stand-in.
func PulumiDir(dir string) string { return filepath.Join(dir, "pulumi") }

// Pulumi is the boot's local Pulumi backend, in PulumiDir.
func (b *Booted) Pulumi() (*pulumilocal.Backend, error) {
	return OpenPulumi(b.Tools, b.Dir, b.opts.Stack)
}

// OpenPulumi is the local Pulumi backend of stack's boot in dir, with the engine in tools.
func OpenPulumi(tools, dir, stack string) (*pulumilocal.Backend, error) {
	return pulumilocal.New(tools, PulumiDir(dir), stack)
}

// pulumiLog is where the engine's runs write, appended.
func (b *Booted) pulumiLog() *os.File {
	f, err := os.OpenFile(filepath.Join(b.LogDir(), "pulumi.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return os.Stdout
	}
	return f
}

// Handoff is what the infrastructure stack would hand the services stack for these machines:
// this host's admin kubeconfig (through the forwarder, where the engine runs), the rehearsal's
// identities in the stand-ins' cloud, the PKI, and the boot's deviations as patches.
func (b *Booted) Handoff() (handoff.Infrastructure, error) {
	kubeconfig, err := os.ReadFile(b.HostKubeconfig())
	if err != nil {
		return handoff.Infrastructure{}, err
	}
	base, err := b.AllAddons(b.Cloud())
	if err != nil {
		return handoff.Infrastructure{}, err
	}
	adjusted, err := b.AllAddons(b.Cloud())
	if err != nil {
		return handoff.Infrastructure{}, err
	}
	b.Adjust(adjusted)
	patches, err := addons.Patches(base, adjusted)
	if err != nil {
		return handoff.Infrastructure{}, err
	}
	return handoff.Infrastructure{Kubeconfig: string(kubeconfig), Deployed: b.Deployed(b.Cloud()), AddonPatches: patches}, nil
}

// Adjust makes the boot's deviations to the add-ons (deviation "add-ons"): node-problem-detector
// reads each worker's KernelLog, the workloads with an Azure identity trust the stand-ins'
// certificate, cluster-autoscaler runs at zero replicas and CPU requests are scaled to this host.
func (b *Booted) Adjust(objs []addons.Object) {
	addons.ReadKernelLogFrom(objs, addons.KernelLogFile(KernelLog))
	b.trustEntra(objs)
	share := b.cpuShare()
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			if o.Name == addons.AutoscalerName {
				o.Spec.Replicas = new(int32)
			}
			scaleCPU(&o.Spec.Template.Spec, share)
		case *appsv1.DaemonSet:
			scaleCPU(&o.Spec.Template.Spec, share)
		}
	}
}

// WaitAddons returns once CoreDNS, Prometheus and clusterforge-ops have
// all their replicas available and node-exporter and clusterforge-ops-agent are ready everywhere.
func (b *Booted) WaitAddons(ctx context.Context) error {
	cs, err := b.Clientset()
	if err != nil {
		return err
	}
	for _, d := range []struct{ namespace, name string }{
		{addons.SystemNamespace, addons.DNSName}, {addons.MonitoringNamespace, addons.PrometheusName},
		{addons.SystemNamespace, wellknown.OpsName},
	} {
		var selector *metav1.LabelSelector
		if err := machines.Poll(ctx, 3*time.Minute, d.name, func(ctx context.Context) error {
			dep, err := cs.AppsV1().Deployments(d.namespace).Get(ctx, d.name, metav1.GetOptions{})
			if err == nil && (dep.Status.AvailableReplicas < *dep.Spec.Replicas || dep.Status.ObservedGeneration < dep.Generation) {
				selector = dep.Spec.Selector
				err = fmt.Errorf("%d of %d replicas available", dep.Status.AvailableReplicas, *dep.Spec.Replicas)
			}
			return err
		}); err != nil {
			return fmt.Errorf("%w%s", err, b.unreadyPods(cs, d.namespace, selector))
		}
	}
	for _, d := range []struct{ namespace, name string }{
		{addons.MonitoringNamespace, addons.NodeExporterName}, {addons.SystemNamespace, addons.OpsAgentName},
		{addons.SystemNamespace, addons.NodeProblemDetectorName},
	} {
		if err := machines.Poll(ctx, 3*time.Minute, d.name, func(ctx context.Context) error {
			ds, err := cs.AppsV1().DaemonSets(d.namespace).Get(ctx, d.name, metav1.GetOptions{})
			if err == nil && (ds.Status.NumberReady < ds.Status.DesiredNumberScheduled || ds.Status.DesiredNumberScheduled == 0) {
				err = fmt.Errorf("%d of %d ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
			}
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// unreadyPods describes the selected pods that are not Ready: where they run, their containers'
// states and the last lines each logged, and from its node the route to its IP and what the
// kubelet's probes of it said, so that a wait that timed out says why.
func (b *Booted) unreadyPods(cs kubernetes.Interface, namespace string, selector *metav1.LabelSelector) string {
	if selector == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(selector)})
	if err != nil {
		return "\n  pods: " + err.Error()
	}
	var out strings.Builder
	for _, pod := range pods.Items {
		if slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) {
			continue
		}
		fmt.Fprintf(&out, "\n  pod %s on %s: %s, IP %s", pod.Name, pod.Spec.NodeName, pod.Status.Phase, pod.Status.PodIP)
		for _, c := range pod.Status.Conditions {
			fmt.Fprintf(&out, "; %s=%s %s", c.Type, c.Status, c.Message)
		}
		for _, c := range pod.Status.ContainerStatuses {
			fmt.Fprintf(&out, "\n    container %s: ready %v, %d restarts, state %+v, last %+v", c.Name, c.Ready, c.RestartCount, c.State, c.LastTerminationState)
			lines := int64(20)
			logs, err := cs.CoreV1().Pods(namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &lines}).DoRaw(ctx)
			if err != nil {
				logs = []byte(err.Error())
			}
			fmt.Fprintf(&out, "\n    its log: %s", strings.ReplaceAll(strings.TrimSpace(string(logs)), "\n", "\n      "))
		}
		if pod.Status.PodIP == "" || !slices.ContainsFunc(b.Machines, func(m *Machine) bool { return m.Name == pod.Spec.NodeName }) {
			continue
		}
		for _, probe := range [][]string{
			{"ip", "route", "get", pod.Status.PodIP},
			{"sh", "-c", "journalctl -u kubelet --no-pager -o short-precise -n 2000 | grep -F " + pod.Name + " | tail -n 5"},
			{"tail", "-n", "8", "/var/log/azure-vnet.log"},
		} {
			text, err := b.Exec(ctx, pod.Spec.NodeName, probe...)
			if err != nil {
				text = err.Error()
			}
			fmt.Fprintf(&out, "\n    on %s, %s: %s", pod.Spec.NodeName, strings.Join(probe, " "), strings.ReplaceAll(strings.TrimSpace(text), "\n", "\n      "))
		}
	}
	return out.String()
}

// cpuShare is what the add-ons' CPU requests are scaled by: every worker machine sees this host's
// CPUs, fewer than the smallest worker VM size's, so requests sized for the VM would not fit.
func (b *Booted) cpuShare() float64 {
	share := 1.0
	for _, m := range b.Machines {
		if m.Image != machine.ImageWorker {
			continue
		}
		pool, _ := b.Cluster.PoolOfRole(m.Role)
		if size, ok := spec.VMCapacity(pool.VMSize); ok && size.CPUs > 0 {
			share = min(share, float64(runtime.NumCPU())/float64(size.CPUs))
		}
	}
	return share
}

// scaleCPU multiplies every container's CPU request and limit by share.
func scaleCPU(pod *corev1.PodSpec, share float64) {
	if share >= 1 {
		return
	}
	for i := range pod.Containers {
		for _, list := range []corev1.ResourceList{pod.Containers[i].Resources.Requests, pod.Containers[i].Resources.Limits} {
			if q, ok := list[corev1.ResourceCPU]; ok {
				list[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(float64(q.MilliValue())*share), resource.DecimalSI)
			}
		}
	}
}

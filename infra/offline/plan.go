// Package offline runs the real clusterforge programs on Pulumi's mock engine, offline, the
// infrastructure's then the cluster services' (reading its handoff), and reports what their
// `pulumi up`s would create: every resource with its inputs (secrets redacted) and the
// user-data each machine role boots with.
package offline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/capacity"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/azure"
	"github.com/clusterforge/clusterforge/infra/handoff"
	"github.com/clusterforge/clusterforge/infra/program"
	servicesprogram "github.com/clusterforge/clusterforge/infra/services"
)

// Project is the Pulumi project name (Pulumi.yaml).
const Project = program.Project

// Result is what the program registered.
type Result struct {
	Stack     string
	Cluster   *spec.Cluster
	Resources []Resource
	// UserData maps each machine role to its decoded customData.
	UserData map[string]string
	// Kubeconfigs maps each Kubernetes provider to the kubeconfig it was given.
	Kubeconfigs map[string]string
	// HubGroup is the peered group of the stack's hub, with every stack beside it on that hub.
	HubGroup spec.LimitUse
}

// Run plans a stack from its stack file (stacks/Pulumi.<stack>.yaml). With a bundle, the
// certificates, keys and tokens in the user-data and kubeconfigs are that PKI's, so the machines
// the plan describes can boot (`make boot`); without, they are placeholders.
func Run(stack, stackFile string, bundle *pki.Bundle) (*Result, error) {
	return RunAfter(stack, stackFile, bundle, program.Previous{})
}

// RunAfter plans a stack that has been applied before.
func RunAfter(stack, stackFile string, bundle *pki.Bundle, prev program.Previous) (*Result, error) {
	return run(stack, stackFile, bundle, prev, nil)
}

// Gallery answers the program's reads of gallery image versions: each version's tags, by its id.
type Gallery map[string]map[string]string

// run plans a stack, the gallery answering the reads of its images.
func run(stack, stackFile string, bundle *pki.Bundle, prev program.Previous, gallery Gallery) (*Result, error) {
	cluster, err := spec.LoadStack(stackFile)
	if err != nil {
		return nil, err
	}
	// The clusters beside this one on its hub count in the hub's peered group.
	siblings, err := spec.LoadSiblings(filepath.Dir(stackFile), stack)
	if err != nil {
		return nil, err
	}
	if err := spec.CheckHub(cluster, siblings); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(stackFile)
	if err != nil {
		return nil, err
	}
	raw, err := spec.ConfigJSON(data) // what Pulumi hands the program
	if err != nil {
		return nil, fmt.Errorf("%s: %w", stackFile, err)
	}
	rec := newRecorder(bundle)
	rec.project, rec.stack, rec.gallery = Project, stack, gallery
	rec.references = resource.PropertyMap{}
	if prev.AppliedSpec != "" {
		rec.references[program.AppliedOutput] = resource.NewProperty(prev.AppliedSpec)
	}
	var services *handoff.Infrastructure
	infrastructure := func(ctx *pulumi.Context) error {
		out, err := program.Build(ctx)
		if err == nil {
			out.ApplyT(func(v any) any { h := v.(handoff.Infrastructure); services = &h; return nil })
		}
		return err
	}
	config := map[string]string{spec.ConfigKey: string(raw)}
	if prev.RollStep != "" {
		config[program.RollStepKey] = program.RollStep(prev.RollStep, time.Now())
	}
	if err := runMocked(infrastructure, rec, config); err != nil {
		return nil, err
	}
	// The services stack, reading the infrastructure's handoff through its stack reference.
	if services == nil {
		return nil, fmt.Errorf("the infrastructure program handed the services nothing")
	}
	value, err := handoffProperty(*services)
	if err != nil {
		return nil, err
	}
	rec.project, rec.references = servicesprogram.Project, resource.PropertyMap{handoff.Output: value}
	if err := runMocked(servicesprogram.Run, rec, config); err != nil {
		return nil, err
	}
	sort.SliceStable(rec.resources, func(i, j int) bool {
		a, b := rec.resources[i], rec.resources[j]
		return a.Type < b.Type || a.Type == b.Type && a.Name < b.Name
	})
	return &Result{Stack: stack, Cluster: cluster, Resources: rec.resources, UserData: rec.userData, Kubeconfigs: rec.kubeconfigs, HubGroup: cluster.HubGroup(siblings)}, nil
}

// runMocked runs a program on the mock engine as a preview, rec answering and recording.
func runMocked(run pulumi.RunFunc, rec *recorder, config map[string]string) error {
	err := pulumi.RunErr(run, pulumi.WithMocks(rec.project, rec.stack, rec), func(info *pulumi.RunInfo) {
		info.Config, info.DryRun = config, true
	})
	if err != nil {
		return err
	}
	return errors.Join(rec.errs...)
}

// handoffProperty is the handoff as the infrastructure stack's output holds it: a secret object.
func handoffProperty(h handoff.Infrastructure) (resource.PropertyValue, error) {
	data, err := json.Marshal(h)
	if err != nil {
		return resource.PropertyValue{}, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return resource.PropertyValue{}, err
	}
	return resource.MakeSecret(resource.NewPropertyValue(m)), nil
}

// WriteStack plans a stack with a real PKI, as `make plan` does: the PKI kept in
// <out>/<stack>.pki.json is reused while the stack certifies the same names (else issued anew and
// kept once the plan succeeds), and the plan is written to <out>/<stack>.
func WriteStack(stack, stackFile, out string) (*Result, error) {
	cluster, err := spec.LoadStack(stackFile)
	if err != nil {
		return nil, err
	}
	bundle, savePKI, err := pki.Kept(filepath.Join(out, stack+".pki.json"), pki.Authorities(cluster), pki.Profiles(cluster))
	if err != nil {
		return nil, err
	}
	result, err := Run(stack, stackFile, &bundle)
	if err != nil {
		return nil, err
	}
	if err := result.Write(filepath.Join(out, stack)); err != nil {
		return nil, err
	}
	return result, savePKI()
}

// Write stores resources.json, machines/<role>/user-data and the admin kubeconfig under dir. It writes a sibling
// directory first and renames it into place, so dir never holds half a plan.
func (r *Result) Write(dir string) error {
	staging := dir + ".new"
	if err := r.writeAll(staging); err != nil {
		os.RemoveAll(staging)
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(staging, dir)
}

func (r *Result) writeAll(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r.Resources, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "resources.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if len(r.Kubeconfigs) != 1 {
		return fmt.Errorf("plan: the program registered %d Kubernetes providers, want 1 (the admin kubeconfig)", len(r.Kubeconfigs))
	}
	for _, kubeconfig := range r.Kubeconfigs {
		if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), []byte(kubeconfig), 0o600); err != nil {
			return err
		}
	}
	for role, ud := range r.UserData {
		path := UserDataPath(dir, role)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(ud), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// UserDataPath is where a plan in dir keeps the user-data of a role's machines.
func UserDataPath(dir, role string) string { return filepath.Join(dir, "machines", role, "user-data") }

// Count returns how many resources of a type were registered.
func (r *Result) Count(typ string) int {
	n := 0
	for _, res := range r.Resources {
		if res.Type == typ {
			n++
		}
	}
	return n
}

// Summary prints resources per type, machines per role and the key lesson settings.
func (r *Result) Summary(w io.Writer) {
	c := r.Cluster
	counts := map[string]int{}
	for _, res := range r.Resources {
		counts[res.Type]++
	}
	types := make([]string, 0, len(counts))
	for t := range counts {
		types = append(types, t)
	}
	sort.Strings(types)
	fmt.Fprintf(w, "stack %s: cluster %s in %s, sized for %d nodes, %d resources\n", r.Stack, c.Name, c.Location, c.TargetNodes, len(r.Resources))
	for _, t := range types {
		fmt.Fprintf(w, "  %4d  %s\n", counts[t], t)
	}
	fmt.Fprintln(w, "machines:")
	for _, e := range c.EtcdClusters() {
		fmt.Fprintf(w, "  %-14s %d VMs %s (zones %s), quota %s\n", e.Role, len(e.Members), e.Spec.VMSize, strings.Join(c.Zones, ","), spec.GiB(e.Spec.QuotaBackendBytes))
	}
	fmt.Fprintf(w, "  %-14s %d in a scale set %s behind %s\n", spec.RoleAPIServer, c.APIServer.Count, c.APIServer.VMSize, c.APIServerURL())
	for _, p := range c.Pools {
		sets := 0
		for _, s := range c.ScaleSets() {
			if s.Pool.Name == p.Name {
				sets++
			}
		}
		fmt.Fprintf(w, "  %-14s %d nodes now, up to %d, %s, %d scale set(s)\n", spec.WorkerRole(p.Name), p.Nodes, p.MaxNodes, p.VMSize, sets)
	}
	fmt.Fprintln(w, "VMs and vCPUs by size, now (pools at nodes) and at full size (maxNodes), for the region's and each family's quota:")
	machinesNow, machinesFull := c.MachinesBySize(false), c.MachinesBySize(true)
	vcpusNow, vcpusFull := c.VCPUsBySize(false), c.VCPUsBySize(true)
	for _, size := range slices.Sorted(maps.Keys(machinesFull)) {
		fmt.Fprintf(w, "  %-26s %6d VMs %8d vCPUs now, %6d VMs %8d vCPUs full\n", size, machinesNow[size], vcpusNow[size], machinesFull[size], vcpusFull[size])
	}
	fmt.Fprintln(w, "lessons:")
	fmt.Fprintf(w, "  L03 events in their own etcd (%d members) via --etcd-servers-overrides=/events#...\n", c.EtcdEvents.Members)
	fmt.Fprintf(w, "  L04 etcd --quota-backend-bytes=%d, apiserver compaction every %s\n", c.EtcdMain.QuotaBackendBytes, c.APIServer.EtcdCompactionInterval)
	fmt.Fprintf(w, "  L05 load balancer probe %s\n", spec.APIServerProbePath)
	fmt.Fprintf(w, "  L09 --max-requests-inflight=%d --max-mutating-requests-inflight=%d\n", c.APIServer.MaxRequestsInflight, c.APIServer.MaxMutatingRequestsInflight)
	fmt.Fprintf(w, "  L13 CoreDNS replicas %d, one per node (required anti-affinity)\n", c.DNS.Replicas)
	for _, p := range c.Pools {
		req := addons.BalloonRequests(c, p)
		fmt.Fprintf(w, "  L15 %s: %d balloon pods of %s CPU, %s memory at priority %d\n", p.Name, p.Nodes, req.Cpu(), req.Memory(), addons.BalloonPriorityValue)
	}
	fmt.Fprintf(w, "  L16 kube-scheduler %s: gangs through %s PodGroups (gang scheduling: %t) + MostAllocated\n", c.Versions.Kubernetes, machine.GangAPI, machine.GangScheduling(c))
	fmt.Fprintf(w, "  L20 %d parallel pulls sharing %d layer downloads a node; egress through each VNet's NAT gateway (%d SNAT ports a public IP, %d per node at the peak)\n",
		c.Kubelet.MaxParallelImagePulls, c.Kubelet.MaxConcurrentDownloads, spec.SNATPortsPerPublicIP, c.EgressPortsPerNode())
	fmt.Fprintf(w, "  L19 cluster-autoscaler: every scale set from 0 to its capacity, stops above %d%% unready\n", c.Autoscaler.MaxUnreadyPercentage)
	cpus, memory := addons.PrometheusResources(c)
	fmt.Fprintf(w, "  L34 Prometheus %d CPUs (GOMAXPROCS=%d), %s memory\n", cpus, cpus, memory.String())
	for _, v := range c.WorkerVNets() {
		fmt.Fprintf(w, "  L30 worker VNet %s %s: %d nodes x (%d pods + 1) at full size, %d NAT public IPs\n",
			v.Name, v.Prefix, v.Nodes(), v.Pool.MaxPods, c.NATPublicIPs(v.Nodes()))
	}
	r.Headroom(w)
	r.ControlPlaneCPU(w)
	r.Support(w, time.Now())
}

// Support prints the upstream support of every release the stack runs, on today, from
// versions.yaml's support facts; a release past its end or near it is marked WARNING.
func (r *Result) Support(w io.Writer, today time.Time) {
	fmt.Fprintf(w, "Upstream support on %s (versions.yaml's facts, read %s; docs/reference/support.md):\n", today.Format(time.DateOnly), spec.SupportReadOn)
	for _, s := range r.Cluster.SupportStatus(today) {
		mark := "  "
		if s.Warn {
			mark = "  WARNING "
		}
		fmt.Fprintf(w, "%s%-22s %-8s %s\n", mark, s.Key, s.Version, s.Status)
	}
}

// ControlPlaneCPU is the cores each control-plane machine needs at targetNodes, from the scale
// benchmark's published figures (components/capacity), against its VM size's vCPUs.
func (r *Result) ControlPlaneCPU(w io.Writer) {
	f, ok, err := capacity.Published()
	if err != nil {
		fmt.Fprintf(w, "Control-plane CPU: %v\n", err)
		return
	}
	if !ok {
		fmt.Fprintln(w, "Control-plane CPU: no scale benchmark figures published yet (PUBLISH=1 make bench-scale)")
		return
	}
	nodes := r.Cluster.TargetNodes
	needs, err := capacity.Needs(r.Cluster, f, nodes)
	if err != nil {
		fmt.Fprintf(w, "Control-plane CPU: %v\n", err)
		return
	}
	fmt.Fprintf(w, "Control-plane CPU at targetNodes %d, from make bench-scale's figures (%s topology of %s, %s, commit %s, %s; %s holds at %v nodes", nodes, f.Topology, f.Stack, f.Date, f.Commit, f.Machine, f.Hold, f.Steps)
	if f.Extrapolated(nodes) {
		fmt.Fprintf(w, "; extrapolated beyond them")
	}
	fmt.Fprintln(w, "):")
	fmt.Fprintf(w, "  %-11s %-26s %5s %7s %6s  %s\n", "role", "busiest machine", "vCPUs", "cores", "share", "headroom")
	for _, n := range needs {
		fmt.Fprintf(w, "  %-11s %-26s %5d %7.2f %5.0f%%  %.1f vCPUs\n", n.Role, fmt.Sprintf("%s (1 of %d)", n.VMSize, n.Machines), n.VCPUs, n.Cores, 100*n.Share(), float64(n.VCPUs)-n.Cores)
	}
}

// LimitUses is every Azure limit's use by the cluster at full size, in the order of spec.Limits:
// of several instances of one limit, the one closest to it.
func (r *Result) LimitUses() []spec.LimitUse {
	byLimit := map[*spec.Limit][]spec.LimitUse{}
	for _, u := range append(append(r.Cluster.LimitUses(), azure.LimitUses(r.Cluster)...), r.HubGroup) {
		byLimit[u.Limit] = append(byLimit[u.Limit], u)
	}
	uses := make([]spec.LimitUse, 0, len(spec.Limits))
	for _, l := range spec.Limits {
		if in, ok := byLimit[l]; ok {
			uses = append(uses, spec.Worst(in...))
		}
	}
	return uses
}

// Headroom prints the use of every Azure limit at full size, then what to change for each one
// over: a hard limit cannot be reached, a quota needs a request first, a rate limit slows.
func (r *Result) Headroom(w io.Writer) {
	fmt.Fprintf(w, "Azure limits at full size (targetNodes %d, every pool at maxNodes):\n", r.Cluster.TargetNodes)
	fmt.Fprintf(w, "  %9s %9s %6s  %-5s  %s\n", "use", "limit", "share", "kind", "limit: where")
	var over []spec.LimitUse
	for _, u := range r.LimitUses() {
		share, mark := fmt.Sprintf("%.0f%%", 100*u.Share()), ""
		if u.Over() {
			share, mark, over = ">100%", "  "+overMarks[u.Limit.Kind], append(over, u)
		}
		fmt.Fprintf(w, "  %9s %9s %6s  %-5s  %s: %s%s\n", thousands(u.Use), thousands(u.Limit.Value), share, u.Limit.Kind, u.Limit.Name, u.Where, mark)
	}
	for _, u := range over {
		fmt.Fprintf(w, "  %s %s: %s: %s\n", overMarks[u.Limit.Kind], u.Limit.Name, u.Field, u.Fix)
	}
}

// overMarks say what a use past each kind of limit means.
var overMarks = map[spec.LimitKind]string{spec.Hard: "OVER", spec.Quota: "REQUEST", spec.Rate: "THROTTLED"}

// thousands writes n with a comma every three digits, as Azure's pages write limits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Package roll converges a running cluster on its stack file, machine by machine, through the
// stages change.NewPlan computes: etcd members one at a time (followers first, leadership moved
// off a member before it goes, the replacement caught up before the next), apiservers one at a
// time out of the load balancer, worker pools in batches behind a canary, cordoned and drained.
// Before every stage, and before every etcd member, the gates: the cluster validated twice, every
// etcd member healthy and a voter, and for the main etcd a fresh verified backup. A journal makes
// an interrupted roll resume where it stopped. The same Roller drives every Target: the process
// rehearsal, booted machines and Azure. Nothing here imports Pulumi.
package roll

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Observer reads what an environment's machines run.
type Observer interface {
	// Inventory lists the machines running now, per role.
	Inventory(ctx context.Context) (change.Inventory, error)
	// EtcdClient is a client of one etcd cluster, of the named members or all of them.
	EtcdClient(role string, members ...string) (*clientv3.Client, error)
	// Clientset is the admin's Kubernetes client, through the load balancer.
	Clientset() (*kubernetes.Clientset, error)
	// APIServerVersion is the gitVersion one apiserver machine serves on /version.
	APIServerVersion(ctx context.Context, name string) (string, error)
	// ServingCertificate is the certificate a control-plane machine serves.
	ServingCertificate(ctx context.Context, name string) (*x509.Certificate, error)
}

// Target is one environment's machines as a roll acts on them.
type Target interface {
	Observer
	// InRotation reports whether the load balancer sends the apiserver machine requests.
	InRotation(ctx context.Context, name string) (bool, error)
	// LeaseMachine names the machine whose component holds a kube-system lease.
	LeaseMachine(ctx context.Context, lease string) (string, error)
	// TakeOutOfRotation makes the apiserver machine fail its probe, so the load balancer stops
	// sending it requests while it still serves those it has.
	TakeOutOfRotation(ctx context.Context, name string) error
	// StopEtcd stops a member's etcd cleanly before it is removed: it finishes the requests it
	// has and refuses new ones, which clients then send to the other members. Removing a member
	// that still serves aborts its requests ("etcdserver: server stopped").
	StopEtcd(ctx context.Context, name string) error
	// Replace stops the machine, empties its local disk and starts it again built from the
	// desired spec, as a new VM would be; it returns once the machine's units have started.
	Replace(ctx context.Context, name string) error
	// FreshBackup passes when the main etcd may be touched: every member healthy and a voter,
	// no alarm, and a verified snapshot younger than the backup interval (clusterforge-etcd-backup
	// gate, run on a member). BackupNow takes and verifies a snapshot.
	FreshBackup(ctx context.Context) error
	BackupNow(ctx context.Context) error
	// Prepare applies, before any machine is replaced, what changes in place and the new models
	// the replacements are built from.
	Prepare(ctx context.Context) error
	// Commit records the desired spec as what runs, once every machine runs it.
	Commit(ctx context.Context) error
}

// WorkerReplacer is a Target that replaces a batch of workers at once, as Replace does each:
// on Azure, one request per scale set for the whole batch, not one per machine.
type WorkerReplacer interface {
	ReplaceWorkers(ctx context.Context, names []string) error
}

// ModelTarget is a Target whose new worker machines boot from a model it keeps per pool (Azure's
// scale-set models, which a scale-out uses too): Prepare leaves every pool's model as applied, and
// MoveWorkerModels makes the named pools' models the desired ones and every other pool's the
// applied one. The roll moves the canary's pool first and the rest once the canary has passed.
// StaleWorkers are the workers not on their pool's model: those a scale-out added while it was held.
type ModelTarget interface {
	MoveWorkerModels(ctx context.Context, pools []string) error
	StaleWorkers(ctx context.Context) ([]string, error)
}

// putBackTimeout bounds putting a failed canary's model back: one whole `pulumi up`.
const putBackTimeout = 30 * time.Minute

// Roller runs one roll.
type Roller struct {
	Target  Target
	Applied *spec.Cluster
	Desired *spec.Cluster
	// Journal is the file that records finished machines, so an interrupted roll resumes.
	Journal string
	// Progress receives one line per step of every machine.
	Progress io.Writer
	// ValidationPause is the wait between a gate's validations. Default 10 s (kops).
	ValidationPause time.Duration
	// ValidationTimeout is how long a gate waits for two validations in a row before it refuses
	// the stage. Default 5 minutes (kops waits 15; a roll that stops early loses nothing).
	ValidationTimeout time.Duration
	// MachineTimeout bounds each machine's replacement, and a worker batch's for every
	// DrainParallelism machines in it. Default 10 minutes.
	MachineTimeout time.Duration
	// DrainParallelism is how many nodes of a batch drain at once. Default 10.
	DrainParallelism int
	// Extra are changes the spec does not show (certificates due for renewal).
	Extra []change.Change
	// StopAfter stops the roll after that many machines, as an interruption would (drills).
	StopAfter int

	logMu sync.Mutex // the parallel drains log at once
}

// Result is one replaced machine.
type Result struct {
	Name, Role string
	Took       time.Duration
}

// ErrStopped is returned when StopAfter ends a roll early.
var ErrStopped = errors.New("roll stopped before the end, as asked; run it again to resume")

// Run computes the plan and executes it, skipping the machines the journal has finished.
func (r *Roller) Run(ctx context.Context) ([]Result, error) {
	r.defaults()
	cs, err := r.Target.Clientset()
	if err != nil {
		return nil, err
	}
	ctx, release, err := Lock(ctx, cs, Holder("roll"))
	if err != nil {
		return nil, err
	}
	defer release()
	inv, err := r.Target.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := change.NewPlan(r.Applied, r.Desired, inv, r.Extra...)
	if err != nil {
		return nil, err
	}
	for _, c := range plan.Changes {
		r.logf("change  %s", c)
	}
	j, err := r.openJournal()
	if err != nil {
		return nil, err
	}
	total := len(plan.Machines())
	if len(j.Done) == 0 {
		r.logf("preparing: in-place changes and the new models")
		if err := r.Target.Prepare(ctx); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
	} else {
		r.logf("resuming: %d of %d machines were replaced before", len(j.Done), total)
	}
	var results []Result
	for _, stage := range plan.Stages {
		if allDone(j, stage) {
			continue
		}
		r.logf("stage %s (%s): %d machines in %d batches", stage.Role, stage.Kind, countMachines(stage), len(stage.Batches))
		if err := r.gate(ctx, stage.Role); err != nil {
			return results, err
		}
		if stage.Kind == change.EtcdMember {
			stage = r.memberOrder(ctx, stage)
		}
		rolled := 0 // batches rolled in this stage by this run: the first is the canary, on a resume too
		for _, batch := range stage.Batches {
			batch = slices.DeleteFunc(slices.Clone(batch), func(m string) bool { return slices.Contains(j.Done, m) })
			if len(batch) == 0 {
				continue
			}
			if r.StopAfter > 0 && len(j.Done) >= r.StopAfter {
				return results, ErrStopped
			}
			began := time.Now()
			// Each machine is recorded as it finishes: a resumed roll redoes none of them.
			finished := func(m string) error {
				results = append(results, Result{Name: m, Role: stage.Role, Took: time.Since(began)})
				j.Done = append(j.Done, m)
				if err := j.save(r.Journal); err != nil {
					return err
				}
				r.logf("[%d/%d] %s done in %s", len(j.Done), total, m, time.Since(began).Round(100*time.Millisecond))
				return nil
			}
			rollBatch := func() error {
				mctx, cancel := context.WithTimeout(ctx, r.batchTimeout(len(batch)))
				err := r.step(mctx, stage, batch, finished)
				cancel()
				if cause := context.Cause(ctx); err != nil && cause != nil {
					err = errors.Join(err, cause)
				}
				if err != nil {
					return fmt.Errorf("%s %v: %w; the roll stopped here, fix the cause and run it again to resume", stage.Role, batch, err)
				}
				if stage.Kind == change.Workers && rolled == 0 {
					if err := r.validate(ctx); err != nil {
						return fmt.Errorf("the canary %v of %s left the cluster invalid: %w", batch, stage.Role, err)
					}
					r.logf("canary %v of %s validated", batch, stage.Role)
				}
				return nil
			}
			if stage.Kind == change.Workers && !j.WorkerModelsMoved {
				err = r.fleetCanary(ctx, j, plan, stage.Role, rollBatch)
			} else {
				err = rollBatch()
			}
			if err != nil {
				return results, err
			}
			rolled++
		}
	}
	for _, m := range plan.Machines() {
		if !slices.Contains(j.Done, m) {
			return results, fmt.Errorf("internal error: the roll ended with %s not replaced; nothing recorded as applied", m)
		}
	}
	if err := r.heldScaleOuts(ctx); err != nil {
		return results, err
	}
	if err := r.gate(ctx, ""); err != nil {
		return results, err
	}
	if err := r.Target.Commit(ctx); err != nil {
		return results, err
	}
	if err := os.Remove(r.Journal); err != nil && !errors.Is(err, os.ErrNotExist) {
		return results, err
	}
	r.logf("rolled %d machines; the cluster runs the stack file", len(results))
	return results, nil
}

// fleetCanary rolls the first worker batch with its pool's model moved, and those of pools a
// resumed roll has rolled already; every other pool's is held as applied. If the canary fails,
// its pool's model is put back, so no later scale-out boots a model that failed; once it passes,
// every pool's model moves.
func (r *Roller) fleetCanary(ctx context.Context, j *journal, plan change.Plan, role string, rollBatch func() error) error {
	models, ok := r.Target.(ModelTarget)
	if !ok {
		return rollBatch()
	}
	canary, _ := r.Desired.PoolOfRole(role)
	pool := canary.Name
	rolled := r.rolledPools(plan, j)
	moved := rolled
	if !slices.Contains(moved, pool) {
		moved = append(slices.Clone(rolled), pool)
	}
	r.logf("canary: the models of pools %v move; the other pools keep theirs until it passes", moved)
	if err := models.MoveWorkerModels(ctx, moved); err != nil {
		return fmt.Errorf("moving pool %s's model for the canary: %w", pool, err)
	}
	if err := rollBatch(); err != nil {
		if slices.Contains(rolled, pool) {
			return err // its pool was rolled before: its model stays
		}
		// Put back even when the roll was cancelled: a failed model must not stay for scale-outs.
		back, cancel := context.WithTimeout(context.WithoutCancel(ctx), putBackTimeout)
		defer cancel()
		if berr := models.MoveWorkerModels(back, rolled); berr != nil {
			return fmt.Errorf("%w; putting pool %s's model back failed too (%w): it stays the canary's until the roll runs again, "+
				"which moves only the canary's model before anything else", err, pool, berr)
		}
		r.logf("canary failed: pool %s's model is back to the applied one", pool)
		return fmt.Errorf("%w (pool %s's model was put back)", err, pool)
	}
	var pools []string
	for _, p := range r.Desired.Pools {
		pools = append(pools, p.Name)
	}
	if err := models.MoveWorkerModels(ctx, pools); err != nil {
		return fmt.Errorf("moving the models of pools %v after the canary: %w", pools, err)
	}
	r.logf("canary passed: the models of pools %v moved", pools)
	j.WorkerModelsMoved = true
	return j.save(r.Journal)
}

// rolledPools are the pools with a machine the journal finished: a resumed roll keeps their models.
func (r *Roller) rolledPools(plan change.Plan, j *journal) []string {
	var out []string
	for _, stage := range plan.Stages {
		p, ok := r.Desired.PoolOfRole(stage.Role)
		if stage.Kind != change.Workers || !ok || slices.Contains(out, p.Name) {
			continue
		}
		for _, b := range stage.Batches {
			if slices.ContainsFunc(b, func(m string) bool { return slices.Contains(j.Done, m) }) {
				out = append(out, p.Name)
				break
			}
		}
	}
	return out
}

// heldScaleOuts refuses to record the roll while a worker is not on its pool's model: a scale-out
// while its pool was held booted the applied one. The roll run again replaces it.
func (r *Roller) heldScaleOuts(ctx context.Context) error {
	models, ok := r.Target.(ModelTarget)
	if !ok {
		return nil
	}
	stale, err := models.StaleWorkers(ctx)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		return fmt.Errorf("workers %v joined while their pool's model was held and run the applied one: "+
			"nothing recorded as applied; run the roll again to replace them", stale)
	}
	return nil
}

func (r *Roller) defaults() {
	if r.ValidationPause == 0 {
		r.ValidationPause = 10 * time.Second
	}
	if r.ValidationTimeout == 0 {
		r.ValidationTimeout = 5 * time.Minute
	}
	if r.MachineTimeout == 0 {
		r.MachineTimeout = 10 * time.Minute
	}
	if r.DrainParallelism == 0 {
		r.DrainParallelism = 10
	}
}

// batchTimeout bounds a batch: a machine's timeout for each round of DrainParallelism machines.
func (r *Roller) batchTimeout(n int) time.Duration {
	return r.MachineTimeout * time.Duration(1+(n-1)/r.DrainParallelism)
}

func (r *Roller) step(ctx context.Context, stage change.Stage, batch []string, finished func(string) error) error {
	var err error
	switch stage.Kind {
	case change.EtcdMember:
		err = r.replaceMember(ctx, stage.Role, batch[0])
	case change.APIServer:
		err = r.replaceAPIServer(ctx, batch[0])
	default:
		return r.replaceWorkers(ctx, batch, finished)
	}
	if err != nil {
		return err
	}
	return finished(batch[0])
}

func (r *Roller) logf(format string, args ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if r.Progress != nil {
		fmt.Fprintf(r.Progress, "==> "+format+"\n", args...)
	}
}

func countMachines(s change.Stage) int {
	n := 0
	for _, b := range s.Batches {
		n += len(b)
	}
	return n
}

func allDone(j *journal, s change.Stage) bool {
	for _, b := range s.Batches {
		for _, m := range b {
			if !slices.Contains(j.Done, m) {
				return false
			}
		}
	}
	return true
}

// journal is the record of a roll in progress: which plan, and the machines it finished.
type journal struct {
	// Plan is a digest of the applied and desired specs: a journal of another roll is refused.
	Plan string   `json:"plan"`
	Done []string `json:"done"`
	// WorkerModelsMoved: the canary passed and every worker pool's model is the desired one.
	WorkerModelsMoved bool `json:"workerModelsMoved,omitempty"`
}

func (r *Roller) openJournal() (*journal, error) {
	applied, err := r.Applied.Resolved()
	if err != nil {
		return nil, err
	}
	desired, err := r.Desired.Resolved()
	if err != nil {
		return nil, err
	}
	extra, _ := json.Marshal(r.Extra)
	sum := sha256.Sum256(slices.Concat(applied, []byte{0}, desired, []byte{0}, extra))
	digest := hex.EncodeToString(sum[:])
	j := &journal{Plan: digest}
	data, err := os.ReadFile(r.Journal)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return j, j.save(r.Journal)
	case err != nil:
		return nil, err
	}
	var old journal
	if err := json.Unmarshal(data, &old); err != nil {
		return nil, fmt.Errorf("roll journal %s: %w", r.Journal, err)
	}
	if old.Plan != digest {
		return nil, fmt.Errorf("roll journal %s records an unfinished roll toward another spec (%d machines replaced): "+
			"restore the stack file that roll was started from and run it to the end first", r.Journal, len(old.Done))
	}
	return &old, nil
}

func (j *journal) save(path string) error {
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

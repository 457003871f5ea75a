package scale

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/ops/joins"
)

// JoinOptions shape the joins benchmark: Nodes simulated nodes join all at once, then through the
// stepper (Pace's steps, each step's registrations spread over Jitter), Rounds times each.
type JoinOptions struct {
	// Out is the report directory, build/bench/joins.
	Out    string
	Nodes  int
	Rounds int
	// Pace and Jitter are the stack's (spec.Joins).
	Pace   joins.Pace
	Jitter time.Duration
	// Settle is measured after the last node joined, so the per-minute SLI sees the tail.
	Settle      time.Duration
	ScrapeEvery time.Duration
	PodImage    string
}

// DefaultJoinOptions: 1,000 nodes, three rounds of each mode.
func DefaultJoinOptions(out string, pace joins.Pace, jitter time.Duration) JoinOptions {
	return JoinOptions{Out: out, Nodes: 1000, Rounds: 3, Pace: pace, Jitter: jitter, Settle: time.Minute, ScrapeEvery: 5 * time.Second}
}

// Join modes.
const (
	AllAtOnce = "all at once"
	Stepped   = "stepped"
)

// JoinRun is one join of the nodes, judged on the apiservers' mutating SLI over the join and Settle.
type JoinRun struct {
	Mode  string `json:"mode"`
	Round int    `json:"round"`
	// JoinSeconds is from the first registration to the last node Ready.
	JoinSeconds float64 `json:"joinSeconds"`
	// MutatingP99 is the worst mutating call's p99 by clusterloader2's method (seconds);
	// WorstCall names it.
	MutatingP99 float64 `json:"mutatingP99Seconds"`
	WorstCall   string  `json:"worstCall"`
	// Above1s counts mutating calls slower than 1 s.
	Above1s float64      `json:"mutatingAbove1s"`
	Calls   []CallResult `json:"calls"`
}

// JoinSummary is one mode's figure over the rounds.
type JoinSummary struct {
	Mode                                         string
	MedianP99, MinP99, MaxP99, MedianJoinSeconds float64
	Passed, Runs                                 int
}

// JoinReport is joins.json.
type JoinReport struct {
	Machine Machine       `json:"machine"`
	Started time.Time     `json:"started"`
	Nodes   int           `json:"nodes"`
	Step    int           `json:"step"`
	Pause   string        `json:"pause"`
	Jitter  string        `json:"jitter"`
	Runs    []JoinRun     `json:"runs"`
	Summary []JoinSummary `json:"summary"`
}

// Joins runs the joins benchmark and writes joins.json and joins.md into o.Out.
func Joins(ctx context.Context, c Cluster, o JoinOptions, progress io.Writer) (JoinReport, error) {
	rep := JoinReport{Machine: ThisMachine(o.Out), Started: time.Now(), Nodes: o.Nodes, Step: o.Pace.Step,
		Pause: o.Pace.Pause.String(), Jitter: o.Jitter.String()}
	if err := o.Pace.Validate(); err != nil {
		return rep, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return rep, err
	}
	load, err := NewLoad(ctx, c, o.PodImage, progress)
	if err != nil {
		return rep, err
	}
	cfg, err := c.NodeConfig()
	if err != nil {
		return rep, err
	}
	// Every node is its own kubelet: no client-side pacing.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	protobuf(cfg)
	nodes, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return rep, err
	}
	have, _ := load.readyNodes()
	for round := 1; round <= o.Rounds; round++ {
		for _, mode := range []string{AllAtOnce, Stepped} {
			fmt.Fprintf(progress, "==> joins: round %d of %d, %s: %d nodes\n", round, o.Rounds, mode, o.Nodes)
			run, err := joinOnce(ctx, c, load, nodes, have, mode, o, progress)
			if err != nil {
				return rep, fmt.Errorf("round %d, %s: %w", round, mode, err)
			}
			run.Round = round
			fmt.Fprintf(progress, "==> joins: round %d, %s: joined in %.0f s, mutating p99 %.2f s (%s)\n", round, mode, run.JoinSeconds, run.MutatingP99, run.WorstCall)
			rep.Runs = append(rep.Runs, run)
			if err := writeJSON(filepath.Join(o.Out, "joins.json"), rep); err != nil {
				return rep, err
			}
			if err := load.removeNodes(ctx, nodes, have, have+o.Nodes, progress); err != nil {
				return rep, err
			}
		}
	}
	rep.Summary = summarizeJoins(rep.Runs)
	if err := writeJSON(filepath.Join(o.Out, "joins.json"), rep); err != nil {
		return rep, err
	}
	return rep, os.WriteFile(filepath.Join(o.Out, "joins.md"), []byte(JoinsMarkdown(rep)), 0o644)
}

// joinOnce joins o.Nodes nodes after the have the pool has, in the mode, scraping the apiservers
// throughout; the run is judged from the first registration to Settle after the last join.
func joinOnce(ctx context.Context, c Cluster, load *Load, nodes *kubernetes.Clientset, have int, mode string, o JoinOptions, progress io.Writer) (JoinRun, error) {
	run := JoinRun{Mode: mode}
	targets, err := c.Targets()
	if err != nil {
		return run, err
	}
	first, err := scrapeAll(ctx, targets, KindAPIServer, APIServerMetrics)
	if err != nil {
		return run, err
	}
	scrapes := []Scrape{{At: time.Now(), Calls: CallHistograms(first)}}
	var mu sync.Mutex
	scrapeCtx, stopScraping := context.WithCancel(ctx)
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		every(scrapeCtx, o.ScrapeEvery, func() {
			if s, err := scrapeAll(scrapeCtx, targets, KindAPIServer, APIServerMetrics); err == nil {
				mu.Lock()
				scrapes = append(scrapes, Scrape{At: time.Now(), Calls: CallHistograms(s)})
				mu.Unlock()
			}
		})
	}()
	pace, jitter := o.Pace, o.Jitter
	if mode == AllAtOnce {
		pace.Step, pace.Pause, jitter = o.Nodes, 0, 0
	}
	pool := &kwokPool{load: load, nodes: nodes, registered: have, jitter: jitter}
	began := time.Now()
	err = joins.Grow(ctx, pool, have+o.Nodes, pace, time.Second, progress)
	run.JoinSeconds = time.Since(began).Seconds()
	if err == nil {
		err = sleep(ctx, o.Settle)
	}
	stopScraping()
	<-scraped
	if err != nil {
		return run, err
	}
	last, err := scrapeAll(ctx, targets, KindAPIServer, APIServerMetrics)
	if err != nil {
		return run, err
	}
	scrapes = append(scrapes, Scrape{At: time.Now(), Calls: CallHistograms(last)})
	run.Calls = Judge(scrapes)
	for _, call := range run.Calls {
		if call.Class != Mutating.Name {
			continue
		}
		run.Above1s += call.Above1s
		if call.P99 > run.MutatingP99 || run.WorstCall == "" {
			run.MutatingP99, run.WorstCall = call.P99, call.Call.String()
		}
	}
	return run, nil
}

// kwokPool is the rehearsal's KWOK nodes as joins.Grow drives them: a capacity step registers its
// nodes (each with its base pod, as its kubelet and DaemonSet would), each at a random moment
// within jitter; a node has joined when it is Ready.
type kwokPool struct {
	load       *Load
	nodes      *kubernetes.Clientset
	registered int
	jitter     time.Duration
}

func (k *kwokPool) Capacity(context.Context) (int, error) { return k.registered, nil }

func (k *kwokPool) SetCapacity(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n-k.registered)
	for i := k.registered; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if k.jitter > 0 {
				if err := sleep(ctx, rand.N(k.jitter)); err != nil {
					errs <- err
					return
				}
			}
			if err := k.load.addNode(ctx, k.nodes, i); err != nil {
				errs <- fmt.Errorf("node %d: %w", i, err)
				return
			}
			if err := k.load.addBasePod(ctx, i); err != nil {
				errs <- fmt.Errorf("node %d's base pod: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	k.registered = n
	return <-errs // nil when none failed
}

func (k *kwokPool) Joined(context.Context) (int, error) {
	ready, _ := k.load.readyNodes()
	return ready, nil
}

// removeNodes deletes nodes [lo, hi) and their base pods and waits until the pool is back to lo.
func (l *Load) removeNodes(ctx context.Context, nodes *kubernetes.Clientset, lo, hi int, progress io.Writer) error {
	if err := parallel(lo, hi, func(n int) error { return l.removeNode(ctx, nodes, n) }); err != nil {
		return err
	}
	return waitFor(ctx, 5*time.Minute, progress, "nodes left after removal", func() (int, int) {
		return len(l.nodes.List()), lo
	}, func(got, want int) bool { return got <= want })
}

// summarizeJoins is each mode's median, minimum and maximum over its runs.
func summarizeJoins(runs []JoinRun) []JoinSummary {
	var out []JoinSummary
	for _, mode := range []string{AllAtOnce, Stepped} {
		s := JoinSummary{Mode: mode, MinP99: math.Inf(1), MaxP99: math.Inf(-1)}
		var p99s, took []float64
		for _, r := range runs {
			if r.Mode != mode {
				continue
			}
			s.Runs++
			if r.MutatingP99 <= Mutating.Threshold.Seconds() {
				s.Passed++
			}
			p99s, took = append(p99s, r.MutatingP99), append(took, r.JoinSeconds)
			s.MinP99, s.MaxP99 = math.Min(s.MinP99, r.MutatingP99), math.Max(s.MaxP99, r.MutatingP99)
		}
		if s.Runs > 0 {
			s.MedianP99, s.MedianJoinSeconds = median(p99s), median(took)
			out = append(out, s)
		}
	}
	return out
}

// JoinsMarkdown is joins.md: the headline per mode, then every run.
func JoinsMarkdown(r JoinReport) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# Joins benchmark: %d nodes all at once vs stepped\n\n", r.Nodes)
	fmt.Fprintf(&b, "Machine: %d cores (%s), %d GiB, kernel %s. Started %s. Stepper: %d nodes a step, %s pause after each step joined, registrations spread over %s.\n\n",
		m.Cores, m.CPU, m.MemoryGiB, m.Kernel, r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Step, r.Pause, r.Jitter)
	b.WriteString("| mode | runs within 1 s | mutating p99, median (min–max) | join time, median |\n|---|---|---|---|\n")
	for _, s := range r.Summary {
		fmt.Fprintf(&b, "| %s | %d of %d | %s (%s–%s) | %.0f s |\n", s.Mode, s.Passed, s.Runs, seconds(s.MedianP99), seconds(s.MinP99), seconds(s.MaxP99), s.MedianJoinSeconds)
	}
	b.WriteString("\n| round | mode | join time | mutating p99 | worst call | mutating calls > 1 s |\n|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "| %d | %s | %.0f s | %s | %s | %.0f |\n", run.Round, run.Mode, run.JoinSeconds, seconds(run.MutatingP99), run.WorstCall, run.Above1s)
	}
	b.WriteString("\nEach run registers the nodes (a node and its base pod each, as a kubelet and its DaemonSet would) and is judged from the first registration until a minute after the last node is Ready: p99 by clusterloader2's method (the 99th percentile of per-minute p99s of `apiserver_request_sli_duration_seconds`), worst mutating call. The nodes are removed between runs.\n")
	return b.String()
}

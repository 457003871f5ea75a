package scaleset

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clusterforge/clusterforge/components/ops/joins"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Growth adds to what each set has and lowers none; it spreads over ordinary sets and fills
// single placement groups one at a time, so a pool grown part way holds whole fabrics.
func TestGrowAddsToEachSet(t *testing.T) {
	even := []spec.ScaleSet{{MaxNodes: 100}, {MaxNodes: 100}, {MaxNodes: 30}}
	fabrics := []spec.ScaleSet{{MaxNodes: 100, SinglePlacementGroup: true}, {MaxNodes: 100, SinglePlacementGroup: true}, {MaxNodes: 100, SinglePlacementGroup: true}}
	for _, tc := range []struct {
		sets []spec.ScaleSet
		from []int
		n    int
		want []int
	}{
		{even, []int{0, 0, 0}, 0, []int{0, 0, 0}},
		{even, []int{0, 0, 0}, 2, []int{1, 1, 0}},
		{even, []int{0, 0, 0}, 90, []int{30, 30, 30}},
		{even, []int{0, 0, 0}, 100, []int{35, 35, 30}},
		{even, []int{0, 0, 0}, 230, []int{100, 100, 30}},
		// The autoscaler grew the first set: it keeps its nodes, the others catch up.
		{even, []int{60, 0, 0}, 40, []int{60, 20, 20}},
		{even, []int{60, 0, 0}, 60, []int{60, 30, 30}},
		{fabrics, []int{0, 0, 0}, 150, []int{100, 50, 0}},
		{fabrics, []int{0, 40, 0}, 70, []int{10, 100, 0}},
		{fabrics, []int{0, 0, 0}, 400, []int{100, 100, 100}},
	} {
		if got := grow(tc.from, tc.n, tc.sets); !slices.Equal(got, tc.want) {
			t.Errorf("grow(%v, %d) = %v, want %v", tc.from, tc.n, got, tc.want)
		}
	}
}

// TestGrowStepsAScaleSetOnTheFakeARMServer grows a pool of two scale sets through joins.Grow:
// every update ARM receives raises the pool by at most a step, and each comes after the
// previous step's nodes are Ready. Nodes "join" when the fake server accepts an update.
func TestGrowStepsAScaleSetOnTheFakeARMServer(t *testing.T) {
	c := &spec.Cluster{Name: "cf-dev", Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 2, MaxNodes: 2000}}}
	c.Default()
	c.Pools[0].MaxNodes = 2000
	sets := c.ScaleSets()
	// Two sets of 1,000 stand in for a pool past one scale set's limit.
	sets = []spec.ScaleSet{sets[0], sets[0]}
	sets[0].AzureName, sets[1].AzureName = "cf-dev-cpu-0", "cf-dev-cpu-1"
	sets[0].MaxNodes, sets[1].MaxNodes = 1000, 1000

	kube := fake.NewSimpleClientset()
	var mu sync.Mutex
	capacity := map[string]int64{"cf-dev-cpu-0": 1, "cf-dev-cpu-1": 1}
	var totals []int64
	joinAll := func() {
		total := capacity["cf-dev-cpu-0"] + capacity["cf-dev-cpu-1"]
		for n := range total {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu%06d", n), Labels: map[string]string{wellknown.PoolLabel: "cpu"}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}}
			_, _ = kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
		}
	}
	srv := computefake.VirtualMachineScaleSetsServer{
		Get: func(_ context.Context, rg, name string, _ *armcompute.VirtualMachineScaleSetsClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetResponse], errResp azfake.ErrorResponder) {
			mu.Lock()
			defer mu.Unlock()
			n, ok := capacity[name]
			if !ok || rg != "cf-dev" {
				errResp.SetResponseError(http.StatusNotFound, "NotFound")
				return resp, errResp
			}
			resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientGetResponse{VirtualMachineScaleSet: armcompute.VirtualMachineScaleSet{
				Name: to.Ptr(name), Etag: to.Ptr(fmt.Sprintf("%q", fmt.Sprint(n))), SKU: &armcompute.SKU{Capacity: to.Ptr(n)}}}, nil)
			return resp, errResp
		},
		BeginUpdate: func(_ context.Context, rg, name string, update armcompute.VirtualMachineScaleSetUpdate, _ *armcompute.VirtualMachineScaleSetsClientBeginUpdateOptions) (resp azfake.PollerResponder[armcompute.VirtualMachineScaleSetsClientUpdateResponse], errResp azfake.ErrorResponder) {
			mu.Lock()
			defer mu.Unlock()
			if update.Properties != nil || update.SKU == nil || update.SKU.Name != nil {
				errResp.SetResponseError(http.StatusBadRequest, "the update must carry only the SKU's capacity")
				return resp, errResp
			}
			capacity[name] = *update.SKU.Capacity
			if name == "cf-dev-cpu-1" { // the pool's update is done: its nodes join
				totals = append(totals, capacity["cf-dev-cpu-0"]+capacity["cf-dev-cpu-1"])
				joinAll()
			}
			resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientUpdateResponse{}, nil)
			return resp, errResp
		},
	}
	client, err := armcompute.NewVirtualMachineScaleSetsClient(sub, &azfake.TokenCredential{},
		&arm.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: computefake.NewVirtualMachineScaleSetsServerTransport(&srv)}})
	if err != nil {
		t.Fatal(err)
	}
	joinAll()
	pool := &Pool{ScaleSets: client, ResourceGroup: "cf-dev", Sets: sets, Nodes: kube}
	if err := joins.Grow(context.Background(), pool, 1250, joins.Pace{Step: 500, StepTimeout: time.Minute}, time.Millisecond, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := []int64{502, 1002, 1250}; !slices.Equal(totals, want) {
		t.Errorf("pool capacities ARM received %v, want %v", totals, want)
	}
	if err := pool.SetCapacity(context.Background(), 2001); err == nil {
		t.Error("a capacity past the scale sets' maxima was accepted")
	}
}

// The autoscaler grows a scale set between the grower's read and its write: the write carries the
// ETag it read, is refused (412), and the grower reads again and adds to what the autoscaler left,
// or stops if the pool already holds what it asked for (the sets written before the refusal keep
// their new sizes), never lowering a set.
func TestGrowNeverUndoesAnotherWriter(t *testing.T) {
	for _, tc := range []struct {
		raced string
		to    int64
		want  map[string]int64
	}{
		{"cf-dev-cpu-0", 40, map[string]int64{"cf-dev-cpu-0": 40, "cf-dev-cpu-1": 20}},
		{"cf-dev-cpu-1", 50, map[string]int64{"cf-dev-cpu-0": 30, "cf-dev-cpu-1": 50}},
	} {
		sets := []spec.ScaleSet{{AzureName: "cf-dev-cpu-0", MaxNodes: 100}, {AzureName: "cf-dev-cpu-1", MaxNodes: 100}}
		capacity, writes := map[string]int64{"cf-dev-cpu-0": 0, "cf-dev-cpu-1": 0}, map[string]int{}
		etag := func(name string) *string { return to.Ptr(fmt.Sprintf("%q", fmt.Sprint(writes[name]+1))) }
		raced := false
		srv := computefake.VirtualMachineScaleSetsServer{
			Get: func(_ context.Context, _, name string, _ *armcompute.VirtualMachineScaleSetsClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetResponse], errResp azfake.ErrorResponder) {
				resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientGetResponse{VirtualMachineScaleSet: armcompute.VirtualMachineScaleSet{
					Name: to.Ptr(name), Etag: etag(name), SKU: &armcompute.SKU{Capacity: to.Ptr(capacity[name])}}}, nil)
				return resp, errResp
			},
			BeginUpdate: func(_ context.Context, _, name string, update armcompute.VirtualMachineScaleSetUpdate, o *armcompute.VirtualMachineScaleSetsClientBeginUpdateOptions) (resp azfake.PollerResponder[armcompute.VirtualMachineScaleSetsClientUpdateResponse], errResp azfake.ErrorResponder) {
				if !raced { // the autoscaler's scale-up lands after the grower's read
					raced, capacity[tc.raced] = true, tc.to
					writes[tc.raced]++
				}
				if o == nil || o.IfMatch == nil || *o.IfMatch != *etag(name) {
					errResp.SetResponseError(http.StatusPreconditionFailed, "PreconditionFailed")
					return resp, errResp
				}
				if *update.SKU.Capacity < capacity[name] {
					t.Errorf("%s lowered from %d to %d", name, capacity[name], *update.SKU.Capacity)
				}
				capacity[name] = *update.SKU.Capacity
				writes[name]++
				resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientUpdateResponse{}, nil)
				return resp, errResp
			},
		}
		client, err := armcompute.NewVirtualMachineScaleSetsClient("00000000-0000-0000-0000-000000000000", &azfake.TokenCredential{},
			&arm.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: computefake.NewVirtualMachineScaleSetsServerTransport(&srv)}})
		if err != nil {
			t.Fatal(err)
		}
		pool := &Pool{ScaleSets: client, ResourceGroup: "cf-dev", Sets: sets}
		if err := pool.SetCapacity(context.Background(), 60); err != nil {
			t.Errorf("%s raced to %d: %v", tc.raced, tc.to, err)
		}
		if !maps.Equal(capacity, tc.want) {
			t.Errorf("%s raced to %d: capacities %v, want %v", tc.raced, tc.to, capacity, tc.want)
		}
	}
}

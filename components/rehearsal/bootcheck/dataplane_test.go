package bootcheck_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/rehearsal/drills"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Every node registered with the providerID cloud-provider-azure gives a scale-set instance,
// azure://<resource id>, read from the instance metadata at boot: the Azure SDK's parser reads
// it as an instance of a scale set the autoscaler's --nodes names for the node's pool, in the
// cluster's resource group.
func TestProviderIDsAreScaleSetInstancesOfTheirPool(t *testing.T) {
	needBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := booted.Cluster
	autoscaled := map[string]bool{} // the scale-set names cluster-autoscaler's --nodes=min:max:<name> flags give
	for _, f := range addons.AutoscalerFlags(c) {
		if v, ok := strings.CutPrefix(f, "--nodes="); ok {
			autoscaled[v[strings.LastIndex(v, ":")+1:]] = true
		}
	}
	nodes, err := drills.Clientset(t, booted).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Fatal("no nodes")
	}
	for _, n := range nodes.Items {
		raw, ok := strings.CutPrefix(n.Spec.ProviderID, "azure://")
		if !ok {
			t.Errorf("node %s: providerID %q does not start with azure://", n.Name, n.Spec.ProviderID)
			continue
		}
		id, err := arm.ParseResourceID(raw)
		if err != nil {
			t.Errorf("node %s: providerID %q: %v", n.Name, n.Spec.ProviderID, err)
			continue
		}
		if got := id.ResourceType.String(); !strings.EqualFold(got, "Microsoft.Compute/virtualMachineScaleSets/virtualMachines") {
			t.Errorf("node %s: providerID names a %s, not a scale-set instance", n.Name, got)
		}
		if id.Parent == nil || !autoscaled[id.Parent.Name] {
			t.Errorf("node %s: providerID's scale set is not one the autoscaler's --nodes name (%v)", n.Name, autoscaled)
			continue
		}
		if !strings.EqualFold(id.ResourceGroupName, c.ResourceGroup()) {
			t.Errorf("node %s: providerID's resource group %q, the cluster's is %q", n.Name, id.ResourceGroupName, c.ResourceGroup())
		}
		if set := scaleSetNamed(c, id.Parent.Name); set == nil || set.Pool.Name != n.Labels[spec.PoolLabel] {
			t.Errorf("node %s of pool %q is an instance of scale set %s, another pool's", n.Name, n.Labels[spec.PoolLabel], id.Parent.Name)
		}
	}
}

func scaleSetNamed(c *spec.Cluster, name string) *spec.ScaleSet {
	for _, s := range c.ScaleSets() {
		if s.AzureName == name {
			return &s
		}
	}
	return nil
}

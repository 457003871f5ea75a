package addons

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Deployed are the values the add-ons learn only from the cluster's infrastructure, once it
// exists: the infrastructure stack's outputs, which the services stack reads.
type Deployed struct {
	Azure
	// WebhookServingCA is the authority of clusterforge-ops's serving certificate
	// (pki.WebhookServingCA), which the webhook configurations and Prometheus trust.
	WebhookServingCA string `json:"webhookServingCA"`
	// OpsWebhookCert and OpsWebhookKey are clusterforge-ops's serving pair (pki.OpsWebhook);
	// WebhookClientCA is the authority of the apiservers' client certificate it checks.
	OpsWebhookCert  string `json:"opsWebhookCert"`
	OpsWebhookKey   string `json:"opsWebhookKey"`
	WebhookClientCA string `json:"webhookClientCA"`
	// JoinSeed derives each pool's join token (pki.JoinToken), valid until BootstrapTokenExpires.
	JoinSeed              string    `json:"joinSeed"`
	BootstrapTokenExpires time.Time `json:"bootstrapTokenExpires"`
}

// Deploy is every add-on object with the deploy-time values in: Objects, then the Azure objects
// and the webhooks' serving pair, the webhook configurations trusting its authority. The join
// tokens' Secrets (JoinTokenSecrets) are apart: their names change with each token.
func Deploy(c *spec.Cluster, d Deployed) ([]Object, error) {
	objs, err := Objects(c)
	if err != nil {
		return nil, err
	}
	azure, err := AzureObjects(c, d.Azure)
	if err != nil {
		return nil, err
	}
	if d.WebhookServingCA == "" || d.OpsWebhookCert == "" {
		// An empty caBundle fails every webhook call, and the webhooks fail closed: an
		// infrastructure stack's hand-off from before the webhooks' authority of their own.
		return nil, fmt.Errorf("no serving certificate for clusterforge-ops, or no authority for its clients to trust (the infrastructure's hand-off: run its pulumi up first)")
	}
	tls, err := OpsTLS(d.OpsWebhookCert, d.OpsWebhookKey, d.WebhookClientCA)
	if err != nil {
		return nil, err
	}
	TrustOpsCA(objs, d.WebhookServingCA)
	return append(append(objs, azure...), tls), nil
}

// Patch applies strategic-merge patches, by object Key, over objs in place: the adjustments an
// environment makes to the add-ons. A patch whose object is not among objs is refused.
func Patch(objs []Object, patches map[string]string) error {
	used := 0
	for i, o := range objs {
		patch, ok := patches[Key(o)]
		if !ok {
			continue
		}
		used++
		original, err := json.Marshal(o)
		if err != nil {
			return err
		}
		merged, err := strategicpatch.StrategicMergePatch(original, []byte(patch), o)
		if err != nil {
			return fmt.Errorf("patch of %s: %w", Key(o), err)
		}
		patched := reflect.New(reflect.TypeOf(o).Elem()).Interface().(Object)
		if err := json.Unmarshal(merged, patched); err != nil {
			return fmt.Errorf("patch of %s: %w", Key(o), err)
		}
		objs[i] = patched
	}
	if used < len(patches) {
		for key := range patches {
			if !slices.ContainsFunc(objs, func(o Object) bool { return Key(o) == key }) {
				return fmt.Errorf("a patch names %s, which is no add-on object", key)
			}
		}
	}
	return nil
}

// Patches are the strategic-merge patches that take each object of before to the object of
// after at the same place: what Patch applies. Unchanged objects have none.
func Patches(before, after []Object) (map[string]string, error) {
	if len(before) != len(after) {
		return nil, fmt.Errorf("%d objects before, %d after", len(before), len(after))
	}
	out := map[string]string{}
	for i := range before {
		if Key(before[i]) != Key(after[i]) {
			return nil, fmt.Errorf("object %d: %s became %s", i, Key(before[i]), Key(after[i]))
		}
		original, err := json.Marshal(before[i])
		if err != nil {
			return nil, err
		}
		modified, err := json.Marshal(after[i])
		if err != nil {
			return nil, err
		}
		patch, err := strategicpatch.CreateTwoWayMergePatch(original, modified, before[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", Key(before[i]), err)
		}
		if string(patch) != "{}" {
			out[Key(before[i])] = string(patch)
		}
	}
	return out, nil
}

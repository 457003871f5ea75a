package spec

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// Resolved writes the defaulted cluster out in full, every derived value included: the record
// of what was applied, which a later clusterforge with other defaults reads back unchanged.
func (c *Cluster) Resolved() ([]byte, error) { return yaml.Marshal(c) }

// ParseResolved reads what Resolved wrote, this release's or an earlier one's. It decodes as
// strictly as a stack file but does not validate: what was applied may pin a version this
// clusterforge no longer builds, and the comparison with the stack file must still read it. A key
// an earlier release wrote that this one no longer reads is skipped; one it did not write takes
// its default (versions.kubelet: the Kubernetes version, which the kubelets then ran).
func ParseResolved(data []byte) (*Cluster, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("applied spec: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("applied spec is empty")
	}
	c, err := decodeNode(doc.Content[0], false, true)
	if err != nil {
		return nil, fmt.Errorf("applied spec: %w", err)
	}
	return c, nil
}

// Clone is a deep copy through the applied record's encoding: what was applied, as a next run
// would read it.
func (c *Cluster) Clone() (*Cluster, error) {
	data, err := c.Resolved()
	if err != nil {
		return nil, err
	}
	return ParseResolved(data)
}

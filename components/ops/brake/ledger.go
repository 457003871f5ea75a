package brake

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ledgerKey is the ConfigMap key that holds the removals, as JSON.
const ledgerKey = "removals"

// ConfigMapLedger keeps the ledger in one ConfigMap; the apiserver's resourceVersion check makes
// Save a compare-and-swap between the webhook's replicas.
type ConfigMapLedger struct {
	Client          kubernetes.Interface
	Namespace, Name string
}

// Load reads the ConfigMap; a missing one is an empty ledger at version "".
func (l *ConfigMapLedger) Load(ctx context.Context) ([]Removal, string, error) {
	cm, err := l.Client.CoreV1().ConfigMaps(l.Namespace).Get(ctx, l.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var removals []Removal
	if data := cm.Data[ledgerKey]; data != "" {
		if err := json.Unmarshal([]byte(data), &removals); err != nil {
			return nil, "", fmt.Errorf("ConfigMap %s/%s key %s: %w", l.Namespace, l.Name, ledgerKey, err)
		}
	}
	return removals, cm.ResourceVersion, nil
}

// Save creates the ConfigMap at version "" or updates it at that resourceVersion.
func (l *ConfigMapLedger) Save(ctx context.Context, version string, removals []Removal) error {
	data, err := json.Marshal(removals)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: version},
		Data:       map[string]string{ledgerKey: string(data)},
	}
	if version == "" {
		_, err = l.Client.CoreV1().ConfigMaps(l.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	} else {
		_, err = l.Client.CoreV1().ConfigMaps(l.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return ErrConflict
	}
	return err
}

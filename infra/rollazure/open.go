package rollazure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/azure"
	"github.com/clusterforge/clusterforge/infra/program"
	"github.com/clusterforge/clusterforge/infra/services"
)

// Open is the Azure target of a stack as its last `pulumi up` left it: the applied spec and the
// credentials from its outputs (read with the Pulumi CLI, as `pulumi stack output` does), Azure
// through the default credential chain (az login, a managed identity). It needs the Pulumi CLI,
// the stack's backend, Azure and the hub's network: none of which this repository's tests reach.
func Open(ctx context.Context, stackName, workDir string, desired *spec.Cluster, progress io.Writer) (*Target, *spec.Cluster, error) {
	stack, err := auto.SelectStackLocalSource(ctx, stackName, workDir)
	if err != nil {
		return nil, nil, err
	}
	servicesStack, err := auto.SelectStackLocalSource(ctx, stackName, filepath.Join(workDir, services.Dir))
	if err != nil {
		return nil, nil, fmt.Errorf("the cluster services' stack: %w", err)
	}
	outputs, err := stack.Outputs(ctx)
	if err != nil {
		return nil, nil, err
	}
	text := func(key string) (string, error) {
		v, ok := outputs[key].Value.(string)
		if !ok || v == "" {
			return "", fmt.Errorf("stack %s has no %s output: apply it with this clusterforge first", stackName, key)
		}
		return v, nil
	}
	appliedText, err := text(program.AppliedOutput)
	if err != nil {
		return nil, nil, err
	}
	applied, err := spec.ParseResolved([]byte(appliedText))
	if err != nil {
		return nil, nil, err
	}
	appliedBy, _ := outputs[program.AppliedByOutput].Value.(string)
	kubeconfig, err := text("kubeconfig")
	if err != nil {
		return nil, nil, err
	}
	etcdText, err := text("etcdClient")
	if err != nil {
		return nil, nil, err
	}
	subscription, err := text("subscriptionId")
	if err != nil {
		return nil, nil, err
	}
	access, err := accessFrom(kubeconfig, etcdText, desired)
	if err != nil {
		return nil, nil, err
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, nil, err
	}
	if err := checkImages(ctx, desired, galleryTags(cred, nil)); err != nil {
		return nil, nil, err
	}
	compute, err := armcompute.NewClientFactory(subscription, cred, nil)
	if err != nil {
		return nil, nil, err
	}
	nics, err := armnetwork.NewInterfacesClient(subscription, cred, nil)
	if err != nil {
		return nil, nil, err
	}
	return &Target{Cluster: desired, StackName: stackName, Project: program.Project, Stack: &stack, Services: &servicesStack,
		Azure: Clients{ScaleSets: compute.NewVirtualMachineScaleSetsClient(), ScaleSetVMs: compute.NewVirtualMachineScaleSetVMsClient(),
			VMs: compute.NewVirtualMachinesClient(), NICs: nics},
		Access: access, Progress: progress, AppliedBy: appliedBy}, applied, nil
}

// accessFrom builds the clients' TLS from the kubeconfig and etcdClient outputs.
func accessFrom(kubeconfig, etcdClient string, c *spec.Cluster) (Access, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		return Access{}, fmt.Errorf("kubeconfig output: %w", err)
	}
	apiTLS, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return Access{}, err
	}
	// An apiserver's certificate names the load balancer's address, which clients use, not the machine's.
	apiTLS.ServerName = c.Network.APIServerIP
	var e azure.EtcdClientAccess
	if err := json.Unmarshal([]byte(etcdClient), &e); err != nil {
		return Access{}, fmt.Errorf("etcdClient output: %w", err)
	}
	pair, err := tls.X509KeyPair([]byte(e.Cert), []byte(e.Key))
	if err != nil {
		return Access{}, fmt.Errorf("etcdClient output: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(e.CA)) {
		return Access{}, fmt.Errorf("etcdClient output: no CA certificate")
	}
	return Access{REST: cfg, APIServer: apiTLS, Etcd: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}}, nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// retire ends the stack's cluster on purpose in its birth registry, with the operator's Azure
// credentials (the etcd machines may only read retirements): afterwards a member with an empty
// disk may start a cluster of this name anew instead of waiting for a restore.
func retire(dir, stack, confirm string, registryOnly bool) error {
	c, err := spec.LoadStack(spec.StackFile(dir, stack))
	if err != nil {
		return err
	}
	if confirm != c.Name {
		return fmt.Errorf("retiring %s lets an empty etcd start in its place, losing what its backups hold; run after the cluster is gone: forge retire --stack %s --confirm %s", c.Name, stack, c.Name)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	cfg := machine.EtcdBackupFor(c, c.EtcdClusters()[0])
	operator := func() (azcore.TokenCredential, error) { return azidentity.NewDefaultAzureCredential(nil) }
	store, registry, err := etcdbackup.Open(cfg.Cluster, cfg.StoreURL, cfg.BirthsURL, cfg.RetirementsURL, operator)
	if err != nil {
		return err
	}
	if registryOnly {
		store = nil
	}
	ids, err := etcdbackup.RetireAll(ctx, store, registry, "forge retire --stack "+stack)
	if err != nil {
		return err
	}
	fmt.Printf("retired %s: etcd cluster IDs %v\n", cfg.Cluster, ids)
	return nil
}

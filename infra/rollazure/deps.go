package rollazure

import (
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6/fake"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	_ "github.com/pulumi/pulumi/sdk/v3/go/auto"
	_ "github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
)

// Wrapper module for cni-plugins, pinned for the node image and its checks.
module github.com/clusterforge/clusterforge/toolchain/cni-plugins

go 1.26.8

tool (
	github.com/containernetworking/plugins/plugins/ipam/host-local
	github.com/containernetworking/plugins/plugins/main/bridge
	github.com/containernetworking/plugins/plugins/main/loopback
)

require (
	github.com/alexflint/go-filemutex v1.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/containernetworking/cni v1.3.1 // indirect
	github.com/containernetworking/plugins v1.10.0 // indirect
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/nftables v0.3.0 // indirect
	github.com/mdlayher/netlink v1.11.2 // indirect
	github.com/mdlayher/socket v0.6.1 // indirect
	github.com/networkplumbing/go-nft v0.4.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/safchain/ethtool v0.7.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	sigs.k8s.io/knftables v0.0.22 // indirect
)

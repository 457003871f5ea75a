// Wrapper module for the pinned NVIDIA container toolkit, which GPU images install: nvidia-ctk,
// with which the bake sets the runtime's config, and the runtime hook, which a test runs against it.
module github.com/clusterforge/clusterforge/toolchain/nvidia-container-toolkit

go 1.25.0

tool (
	github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook
	github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk
)

require (
	github.com/NVIDIA/go-nvlib v0.8.1 // indirect
	github.com/NVIDIA/go-nvml v0.13.0-1 // indirect
	github.com/NVIDIA/nvidia-container-toolkit v1.18.2 // indirect
	github.com/cyphar/filepath-securejoin v0.5.2 // indirect
	github.com/fsnotify/fsnotify v1.7.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/moby/sys/capability v0.4.0 // indirect
	github.com/moby/sys/reexec v0.1.0 // indirect
	github.com/moby/sys/symlink v0.3.0 // indirect
	github.com/opencontainers/runc v1.3.4 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/opencontainers/runtime-tools v0.9.1-0.20251114084447-edf4cb3d2116 // indirect
	github.com/pelletier/go-toml v1.9.5 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/urfave/cli-altsrc/v3 v3.1.0 // indirect
	github.com/urfave/cli/v3 v3.4.1 // indirect
	golang.org/x/mod v0.29.0 // indirect
	golang.org/x/sys v0.37.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
	tags.cncf.io/container-device-interface v1.1.0 // indirect
	tags.cncf.io/container-device-interface/specs-go v1.1.0 // indirect
)

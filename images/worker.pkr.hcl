# clusterforge worker image on Azure: a Debian 12 VM provisioned by the clusterforge-node
# provisioner, published as an Azure Compute Gallery image version. Two variants: cpu and gpu
# (the gpu build adds the NVIDIA driver and container toolkit first). The stack's pools take the
# resulting gallery image version id as `image`.
#
#   make image-publish STACK=prod-7500 ROLE=worker IMAGE_VERSION=2026.12.5 GALLERY=<gallery id>
#
# writes the variables (images/publish) and runs `packer build` of this template.

packer {
  required_plugins {
    azure = {
      source  = "github.com/hashicorp/azure"
      version = "= 1.4.5"
    }
    clusterforge = {
      source  = "github.com/clusterforge/clusterforge"
      version = ">= 0.1.0"
    }
  }
}

variable "stack" {
  type        = string
  description = "The stack file whose versions and runtime settings the image carries."
}

variable "binaries_dir" {
  type        = string
  default     = "../.tools/node"
  description = "The pinned node binaries (scripts/toolchain.sh node)."
}

variable "preload_images" {
  type = list(object({
    name    = string
    archive = string
    digest  = string
  }))
  description = "Images baked into containerd: the pause image and the add-on images (L25, L26), as images/cmd/mkimages lists them; archive = \"\" pulls the image from its registry."
}

variable "subscription_id" {
  type = string
}

variable "location" {
  type    = string
  default = "eastus2"
}

variable "gallery_resource_group" {
  type = string
}

variable "gallery_name" {
  type    = string
  default = "clusterforge"
}

variable "image_version" {
  type        = string
  description = "Gallery image version, e.g. 2026.11.22."
}

variable "replication_regions" {
  type    = list(string)
  default = ["eastus2"]
}

# R580, NVIDIA's long-term support branch for data center GPUs (to August 2028; R550 and R570 are
# past their end): a release whose .run and fabric manager archive NVIDIA publishes alike.
variable "nvidia_driver_version" {
  type    = string
  default = "580.105.08"
}

# components/spec/versions.yaml's nvidiaContainerToolkit (TestVersionsFile); the bake refuses another.
variable "nvidia_container_toolkit_version" {
  type    = string
  default = "1.18.2"
}

variable "version_tags" {
  type        = map(string)
  description = "The releases the image carries, as tags of its gallery image version (versions.<field> = release): pulumi up and forge refuse a stack pinning others. The clusterforge-node provisioner refuses tags other than what it installs; make image-publish writes them (images/cmd/bakeinputs publish)."
}

locals {
  # variant → the VM size it is built on
  variants = {
    cpu = "Standard_D4ds_v5"
    gpu = "Standard_NC4as_T4_v3"
  }
}

# One source; the build below names a cpu and a gpu variant of it.
source "azure-arm" "worker" {
  use_azure_cli_auth                = true
  subscription_id                   = var.subscription_id
  location                          = var.location
  os_type                           = "Linux"
  image_publisher                   = "Debian"
  image_offer                       = "debian-12"
  image_sku                         = "12-gen2"
  managed_image_resource_group_name = var.gallery_resource_group
  # Every resource the build makes, the gallery image version among them.
  azure_tags = var.version_tags
}

build {
  dynamic "source" {
    for_each = local.variants
    labels   = ["source.azure-arm.worker"]
    content {
      name               = source.key
      vm_size            = source.value
      managed_image_name = "clusterforge-worker-${source.key}-${var.image_version}"

      shared_image_gallery_destination {
        subscription        = var.subscription_id
        resource_group      = var.gallery_resource_group
        gallery_name        = var.gallery_name
        image_name          = "worker-${source.key}"
        image_version       = var.image_version
        replication_regions = var.replication_regions
      }
    }
  }

  # Every variant: nft, for kube-proxy's nftables mode and the metadata guard; ipset, for azure-npm.
  provisioner "shell" {
    inline = [
      "sudo apt-get update -qq",
      "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables ipset",
    ]
  }

  # GPU variant: the NVIDIA driver and container toolkit, before the runtime is configured.
  provisioner "shell" {
    only = ["azure-arm.gpu"]
    inline = [
      "sudo apt-get update -qq",
      # The generic kernel, first: the cloud one leaves InfiniBand (mlx5_ib) out, and the driver's
      # DKMS module must be built for the kernel the VM boots.
      "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-image-amd64 linux-headers-amd64 dkms",
      "sudo DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq linux-image-cloud-amd64",
      "curl -fsSL -o /tmp/nvidia.run https://us.download.nvidia.com/tesla/${var.nvidia_driver_version}/NVIDIA-Linux-x86_64-${var.nvidia_driver_version}.run",
      "sudo sh /tmp/nvidia.run --silent --dkms && rm -f /tmp/nvidia.run",
      "curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | sudo gpg --dearmor -o /usr/share/keyrings/nvidia-container-toolkit.gpg",
      "echo 'deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /' | sudo tee /etc/apt/sources.list.d/nvidia-container-toolkit.list",
      # Every package of the toolkit at the pinned release: apt would take the newest for the others.
      "sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nvidia-container-toolkit=${var.nvidia_container_toolkit_version}-1 nvidia-container-toolkit-base=${var.nvidia_container_toolkit_version}-1 libnvidia-container-tools=${var.nvidia_container_toolkit_version}-1 libnvidia-container1=${var.nvidia_container_toolkit_version}-1",
      # NVSwitch sizes (ND): NVIDIA's fabric manager, the driver's exact version; the kubelet wants
      # its unit there (machine.FabricManagerUnit) and it exits at once on sizes without NVSwitch.
      "curl -fsSL -o /tmp/fm.tar.xz https://developer.download.nvidia.com/compute/nvidia-driver/redist/fabricmanager/linux-x86_64/fabricmanager-linux-x86_64-${var.nvidia_driver_version}-archive.tar.xz",
      "sudo mkdir -p /opt/nvidia-fabricmanager && sudo tar -xJf /tmp/fm.tar.xz -C /opt/nvidia-fabricmanager --strip-components=1 && rm -f /tmp/fm.tar.xz",
      "cd /opt/nvidia-fabricmanager && sudo cp bin/* /usr/bin/ && sudo mkdir -p /usr/share/nvidia/nvswitch && sudo cp share/nvidia/nvswitch/* /usr/share/nvidia/nvswitch/ && sudo cp etc/fabricmanager.cfg /usr/share/nvidia/nvswitch/ && sudo cp systemd/nvidia-fabricmanager.service /lib/systemd/system/",
      # InfiniBand sizes: the RDMA user space NCCL uses, over the generic kernel's mlx5_ib.
      "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rdma-core ibverbs-providers infiniband-diags",
      "echo mlx5_ib | sudo tee /etc/modules-load.d/clusterforge-infiniband.conf",
    ]
  }

  provisioner "clusterforge-node" {
    stack           = var.stack
    binaries_dir    = var.binaries_dir
    use_sudo        = true
    gpu             = source.name == "gpu"
    manifest_output = "../build/images/manifest-${source.name}-${var.image_version}.json"
    version_tags    = var.version_tags

    dynamic "preload_image" {
      for_each = var.preload_images
      content {
        name    = preload_image.value.name
        archive = preload_image.value.archive
        digest  = preload_image.value.digest
      }
    }
  }

  # Azure's generalisation, after our own sysprep.
  provisioner "shell" {
    inline = ["sudo waagent -deprovision+user -force"]
  }
}

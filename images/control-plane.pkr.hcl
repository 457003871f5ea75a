# clusterforge control-plane image on Azure: a Debian 12 VM provisioned by the clusterforge-node
# provisioner with role = "control-plane" (etcd, etcdctl, etcdutl, the Kubernetes control plane with
# kube-scheduler, kubectl, the etcd backup agent and the CSR approver), published
# as an Azure Compute Gallery image version of the image definition "control-plane". The stack's
# controlPlaneImage takes the resulting version id; the etcd and apiserver machines boot it.
#
#   make image-publish STACK=prod-7500 ROLE=control-plane IMAGE_VERSION=2026.12.5 GALLERY=<gallery id>

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
  description = "The stack file whose versions the image carries."
}

variable "binaries_dir" {
  type        = string
  default     = "../.tools/bin"
  description = "The pinned control-plane binaries (scripts/toolchain.sh control-plane)."
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
  description = "Gallery image version, e.g. 2026.11.23."
}

variable "replication_regions" {
  type    = list(string)
  default = ["eastus2"]
}

variable "version_tags" {
  type        = map(string)
  description = "The releases the image carries, as tags of its gallery image version (versions.<field> = release): pulumi up and forge refuse a stack pinning others. The clusterforge-node provisioner refuses tags other than what it installs; make image-publish writes them (images/cmd/bakeinputs publish)."
}

source "azure-arm" "control-plane" {
  use_azure_cli_auth                = true
  subscription_id                   = var.subscription_id
  location                          = var.location
  os_type                           = "Linux"
  image_publisher                   = "Debian"
  image_offer                       = "debian-12"
  image_sku                         = "12-gen2"
  vm_size                           = "Standard_D4ds_v5"
  managed_image_resource_group_name = var.gallery_resource_group
  managed_image_name                = "clusterforge-control-plane-${var.image_version}"
  # Every resource the build makes, the gallery image version among them.
  azure_tags = var.version_tags

  shared_image_gallery_destination {
    subscription        = var.subscription_id
    resource_group      = var.gallery_resource_group
    gallery_name        = var.gallery_name
    image_name          = "control-plane"
    image_version       = var.image_version
    replication_regions = var.replication_regions
  }
}

build {
  sources = ["source.azure-arm.control-plane"]

  provisioner "clusterforge-node" {
    role            = "control-plane"
    stack           = var.stack
    binaries_dir    = var.binaries_dir
    use_sudo        = true
    manifest_output = "../build/images/manifest-control-plane-${var.image_version}.json"
    version_tags    = var.version_tags
  }

  # Azure's generalisation, after our own sysprep.
  provisioner "shell" {
    inline = ["sudo waagent -deprovision+user -force"]
  }
}

# clusterforge images baked on this machine, with no cloud: a Debian 12 root filesystem made by
# debootstrap, provisioned over a chroot by the same clusterforge-node provisioner the azure-arm
# builds run (worker.pkr.hcl, control-plane.pkr.hcl), written as a tarball. `make image-local
# [ROLE=control-plane]` runs it; `make image-check` and `make boot` boot the results.

packer {
  required_plugins {
    clusterforge = {
      source  = "github.com/clusterforge/clusterforge"
      version = ">= 0.1.0"
    }
  }
}

variable "role" {
  type        = string
  default     = "worker"
  description = "The image baked: worker or control-plane."
}

variable "stack" {
  type        = string
  description = "The stack file whose versions and runtime settings the image carries."
}

variable "binaries_dir" {
  type        = string
  description = "The role's pinned binaries (scripts/toolchain.sh node for workers, control-plane for the control plane)."
}

variable "preload_images" {
  type = list(object({
    name    = string
    archive = string
    digest  = string
  }))
  default     = []
  description = "Images baked into a worker's containerd, from archives (images/cmd/mkimages writes them and this variable) or, with archive = \"\", from their registries."
}

variable "output" {
  type        = string
  description = "The root filesystem tarball to write."
}

variable "manifest_output" {
  type        = string
  description = "Where the bake manifest (versions, image digests) is written."
}

source "clusterforge-rootfs" "local" {
  output = var.output
}

build {
  sources = ["source.clusterforge-rootfs.local"]

  provisioner "clusterforge-node" {
    role            = var.role
    stack           = var.stack
    binaries_dir    = var.binaries_dir
    manifest_output = var.manifest_output

    dynamic "preload_image" {
      for_each = var.preload_images
      content {
        name    = preload_image.value.name
        archive = preload_image.value.archive
        digest  = preload_image.value.digest
      }
    }
  }
}

package spec

import "fmt"

// Capacity is what one VM of an Azure size offers, from Azure's size pages
// (learn.microsoft.com/azure/virtual-machines/sizes, read 2026-11).
type Capacity struct {
	// CPUs is the vCPU count.
	CPUs int
	// MemoryGiB is the memory in GiB.
	MemoryGiB int
	// LocalDiskGiB is the instance-local temp or NVMe disk etcd's data dir (L02) and containerd's
	// root (L22) live on: the first local NVMe disk where the size has them, else the temp disk;
	// 0 when the size has neither.
	LocalDiskGiB int
	// GPUs is the NVIDIA GPU count.
	GPUs int
	// InfiniBand is true for sizes with an RDMA InfiniBand NIC. The IB fabric spans one placement
	// group, so their scale sets keep a single one (MaxPlacementGroupInstances).
	InfiniBand bool
	// NVSwitch is true for sizes whose GPUs meet through NVSwitch, which NVIDIA's fabric manager
	// must bring up before any CUDA program runs.
	NVSwitch bool
}

// vmSizes are the sizes clusterforge knows the facts of. A size missing here is refused wherever
// a fact is needed (a local disk, the capacity balloons are sized from, GPUs): add its row from
// Azure's size page rather than guessing from its name.
var vmSizes = map[string]Capacity{}

// sizeFamily adds a family's sizes: vCPUs → memory and local disk in GiB.
func sizeFamily(format string, rows ...[3]int) {
	for _, r := range rows {
		vmSizes[fmt.Sprintf(format, r[0])] = Capacity{CPUs: r[0], MemoryGiB: r[1], LocalDiskGiB: r[2]}
	}
}

func init() {
	// General purpose Dv5 (Intel) and Dav5 (AMD): 4 GiB per vCPU; "d" sizes have a temp disk.
	dv5 := [][3]int{{2, 8, 75}, {4, 16, 150}, {8, 32, 300}, {16, 64, 600}, {32, 128, 1200}, {48, 192, 1800}, {64, 256, 2400}, {96, 384, 3600}}
	for _, f := range []string{"Standard_D%dds_v5", "Standard_D%dd_v5", "Standard_D%dads_v5"} {
		sizeFamily(f, dv5...)
	}
	for _, f := range []string{"Standard_D%ds_v5", "Standard_D%d_v5", "Standard_D%das_v5"} {
		sizeFamily(f, withoutDisk(dv5)...)
	}
	// Memory optimised Ev5 and Eav5: 8 GiB per vCPU up to 64 vCPUs, 672 GiB at 96.
	ev5 := [][3]int{{2, 16, 75}, {4, 32, 150}, {8, 64, 300}, {16, 128, 600}, {20, 160, 750}, {32, 256, 1200}, {48, 384, 1800}, {64, 512, 2400}, {96, 672, 3600}}
	for _, f := range []string{"Standard_E%dds_v5", "Standard_E%dd_v5", "Standard_E%dads_v5"} {
		sizeFamily(f, ev5...)
	}
	for _, f := range []string{"Standard_E%ds_v5", "Standard_E%d_v5", "Standard_E%das_v5"} {
		sizeFamily(f, withoutDisk(ev5)...)
	}
	// Previous generations, as the seeds ran: Dsv3 and DSv2 with temp disks.
	sizeFamily("Standard_D%ds_v3", [3]int{2, 8, 16}, [3]int{4, 16, 32}, [3]int{8, 32, 64}, [3]int{16, 64, 128}, [3]int{32, 128, 256}, [3]int{48, 192, 384}, [3]int{64, 256, 512})
	for name, c := range map[string][4]int{
		"Standard_DS2_v2": {2, 7, 14, 0}, "Standard_DS3_v2": {4, 14, 28, 0}, "Standard_DS4_v2": {8, 28, 56, 0},
		"Standard_DS5_v2": {16, 56, 112, 0}, "Standard_DS11_v2": {2, 14, 28, 0}, "Standard_DS12_v2": {4, 28, 56, 0},
		"Standard_DS13_v2": {8, 56, 112, 0}, "Standard_DS14_v2": {16, 112, 224, 0}, "Standard_DS15_v2": {20, 140, 280, 0},
	} {
		vmSizes[name] = capacity(c)
	}
	// Compute optimised Fsv2: 2 GiB per vCPU.
	sizeFamily("Standard_F%ds_v2", [3]int{2, 4, 16}, [3]int{4, 8, 32}, [3]int{8, 16, 64}, [3]int{16, 32, 128}, [3]int{32, 64, 256}, [3]int{48, 96, 384}, [3]int{64, 128, 512}, [3]int{72, 144, 576})
	// Storage optimised Lsv3: one 1.92 TB local NVMe disk per 8 vCPUs.
	sizeFamily("Standard_L%ds_v3", [3]int{8, 64, 1788}, [3]int{16, 128, 1788}, [3]int{32, 256, 1788}, [3]int{48, 384, 1788}, [3]int{64, 512, 1788}, [3]int{80, 640, 1788})
	// GPU sizes: vCPUs, memory, local disk, GPUs.
	for name, c := range map[string][4]int{
		"Standard_NC4as_T4_v3":      {4, 28, 180, 1},
		"Standard_NC8as_T4_v3":      {8, 56, 352, 1},
		"Standard_NC16as_T4_v3":     {16, 110, 352, 1},
		"Standard_NC64as_T4_v3":     {64, 440, 2880, 4},
		"Standard_NC24ads_A100_v4":  {24, 220, 958, 1},
		"Standard_NC48ads_A100_v4":  {48, 440, 1916, 2},
		"Standard_NC96ads_A100_v4":  {96, 880, 3832, 4},
		"Standard_NC40ads_H100_v5":  {40, 320, 3576, 1},
		"Standard_NC80adis_H100_v5": {80, 640, 3576, 2},
	} {
		vmSizes[name] = capacity(c)
	}
	// ND training sizes: eight SXM GPUs on NVSwitch, one 200 or 400 Gb/s InfiniBand link per GPU.
	for name, c := range map[string]Capacity{
		"Standard_ND96asr_v4":       {CPUs: 96, MemoryGiB: 900, LocalDiskGiB: 6000, GPUs: 8},
		"Standard_ND96amsr_A100_v4": {CPUs: 96, MemoryGiB: 1900, LocalDiskGiB: 6400, GPUs: 8},
		"Standard_ND96isr_H100_v5":  {CPUs: 96, MemoryGiB: 1900, LocalDiskGiB: 3576, GPUs: 8},
		"Standard_ND96isr_H200_v5":  {CPUs: 96, MemoryGiB: 1850, LocalDiskGiB: 3576, GPUs: 8},
	} {
		c.InfiniBand, c.NVSwitch = true, true
		vmSizes[name] = c
	}
}

// capacity reads a row of vCPUs, memory and local disk in GiB, and GPUs.
func capacity(r [4]int) Capacity {
	return Capacity{CPUs: r[0], MemoryGiB: r[1], LocalDiskGiB: r[2], GPUs: r[3]}
}

func withoutDisk(rows [][3]int) [][3]int {
	out := make([][3]int, len(rows))
	for i, r := range rows {
		out[i] = [3]int{r[0], r[1], 0}
	}
	return out
}

// VMCapacity is the facts of an Azure VM size; ok is false for a size clusterforge does not know.
func VMCapacity(size string) (c Capacity, ok bool) {
	c, ok = vmSizes[size]
	return c, ok
}

// HasLocalDisk reports whether a known size has an instance-local temp or NVMe disk.
func HasLocalDisk(size string) bool { return vmSizes[size].LocalDiskGiB > 0 }

// vmSize refuses a size the table does not hold; it returns the facts otherwise.
func (v *validator) vmSize(field, size string) (Capacity, bool) {
	c, ok := VMCapacity(size)
	if !ok {
		v.fail(field, "use a size from spec.vmSizes (docs/reference/stack.md), or add its row there from Azure's size page: vCPUs, memory, local disk, GPUs",
			"the facts of %s are unknown", Excerpt(size))
	}
	return c, ok
}

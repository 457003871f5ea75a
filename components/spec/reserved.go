package spec

// Reservation is what a node keeps from its pods, in millicores and bytes: the kubelet's
// kubeReserved and systemReserved, and the memory its hard eviction threshold holds back.
// Allocatable is what is left; the balloons are sized from it (L15).
type Reservation struct {
	KubeCPUMilli, KubeMemory     int64
	SystemCPUMilli, SystemMemory int64
	EvictionMemory               int64
}

// Fixed parts of every node's reservation: the OS daemons (systemd, journald, sshd, the Azure
// agent) and the kubelet's hard eviction threshold, AKS's value.
const (
	SystemReservedCPUMilli = 100
	SystemReservedMemory   = 500 << 20
	EvictionHardMemory     = 750 << 20
)

// NodeReservation is a node's reservation, as AKS sizes kubeReserved
// (learn.microsoft.com/azure/aks/node-resource-reservations, read 2026-11): CPU by core count
// (60m for one core, 100m for two, 140m for four, then 10m per core), memory 20 MiB per pod the
// node may run plus 50 MiB, so a 1.9 TiB GPU node keeps no more than a small one needs for its pods.
func NodeReservation(size Capacity, maxPods int) Reservation {
	var cpu int64
	switch cores := int64(size.CPUs); {
	case cores <= 2:
		cpu = 60 + 40*(max(cores, 1)-1)
	case cores <= 4:
		cpu = 100 + 20*(cores-2)
	default:
		cpu = 140 + 10*(cores-4)
	}
	return Reservation{
		KubeCPUMilli: cpu, KubeMemory: int64(maxPods)*20<<20 + 50<<20,
		SystemCPUMilli: SystemReservedCPUMilli, SystemMemory: SystemReservedMemory,
		EvictionMemory: EvictionHardMemory,
	}
}

// Allocatable is what a node of the size offers its pods: capacity less the reservation.
func Allocatable(size Capacity, maxPods int) (cpuMilli, memory int64) {
	r := NodeReservation(size, maxPods)
	return int64(size.CPUs)*1000 - r.KubeCPUMilli - r.SystemCPUMilli,
		int64(size.MemoryGiB)<<30 - r.KubeMemory - r.SystemMemory - r.EvictionMemory
}

// Command pause is the sandbox process of the pause image that offline bakes preload in place of
// registry.k8s.io/pause (the bake cannot reach a registry here): it holds the pod's namespaces,
// reaps orphaned children as PID 1 must, and exits 0 on SIGINT or SIGTERM, as the upstream one does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// Command pause is the sandbox ("infra") container of every pod on the kind node: it holds the
// pod's namespaces open, does nothing, reaps zombies when it is the pod's PID 1, and exits when
// the kubelet stops the pod (SIGINT or SIGTERM).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is the tag the image is published under (registry.k8s.io/pause:<version>).
var version = "3.10.1"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Printf("pause (streamingjob) %s\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "warning: pause should be the first process of its PID namespace")
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "shutting down, got signal: %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child; orphans of the pod's namespace are re-parented to PID 1.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

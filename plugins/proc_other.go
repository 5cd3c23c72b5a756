//go:build !linux

package plugins

import "os/exec"

// setParentDeathSignal has no equivalent here; the SDK's parent watch ends
// orphaned plugins.
func setParentDeathSignal(*exec.Cmd) {}

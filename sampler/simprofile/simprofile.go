// Package simprofile names the simulator's workload profiles. It is a leaf:
// the configuration layer validates a profile name against it without
// linking the simulator (config is data; the CLI wires backends), and the
// simulator (sampler/sim) builds its profiles from the same list and tests
// that it implements every name.
package simprofile

import "slices"

// names is the one list of profile names; Names hands out copies so no
// caller can change it.
var names = [...]string{"idle", "training", "data-stall", "launch-bound", "thermal", "memory-pressure", "comm-bound"}

// Default is the profile used when none is named.
const Default = "training"

// Names returns the profile names, in documentation order. The slice is
// the caller's.
func Names() []string { return slices.Clone(names[:]) }

// Valid reports whether name is a known profile.
func Valid(name string) bool { return slices.Contains(names[:], name) }

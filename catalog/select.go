package catalog

import (
	"path"
	"slices"
)

// Select returns the selection of metrics that include and exclude make:
// each a list of glob patterns (path.Match) over metric names and groups
// ("power", "clocks_current_*"). A metric is selected when it matches an
// include pattern (or include is empty) and no exclude pattern. Select
// returns nil, meaning every metric, when both lists are empty. The
// function keeps its own copies of the lists; any goroutine may call it.
func Select(include, exclude []string) func(*Metric) bool {
	if len(include) == 0 && len(exclude) == 0 {
		return nil
	}
	include, exclude = slices.Clone(include), slices.Clone(exclude)
	return func(m *Metric) bool {
		name, group := m.Name, string(m.Group)
		if len(include) > 0 && !MatchAny(include, name, group) {
			return false
		}
		return !MatchAny(exclude, name, group)
	}
}

// MatchAny reports whether any of patterns (path.Match globs) matches any
// of names. A malformed pattern matches nothing.
func MatchAny(patterns []string, names ...string) bool {
	for _, p := range patterns {
		for _, n := range names {
			if ok, _ := path.Match(p, n); ok {
				return true
			}
		}
	}
	return false
}

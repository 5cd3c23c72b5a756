package sampler

import "errors"

// ErrStopping is returned when an output is added to an engine that is
// shutting down.
var ErrStopping = errors.New("sampler: engine is stopping")

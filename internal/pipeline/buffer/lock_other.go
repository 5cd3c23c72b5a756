//go:build !unix

package buffer

import (
	"fmt"
	"os"
)

// lockDir creates dir/LOCK; without flock it cannot exclude a second
// process.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir+"/"+lockName, os.O_RDWR|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock buffer dir: %w", err)
	}
	return f, nil
}

//go:build !unix

package bench

import "errors"

func mkfifo(string) error { return errors.New("FIFOs are not supported on this platform") }

package outputs

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/gpusampler/gpusampler/record"
)

// StdoutError wraps an error writing the process's stdout with what (the
// output's prefix, "stdout" or "execd: stdout"). A reader that is gone (a
// closed pipe: EPIPE, or a closed file) is permanent: nothing will read
// that batch, or any other, again, so it is counted failed at once and
// never held for a retry. Any other error keeps its kind.
func StdoutError(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
		return record.Permanent(err)
	}
	return err
}

//go:build unix

package deadletter

import "syscall"

// oNoFollow makes the open fail on a symlink.
const oNoFollow = syscall.O_NOFOLLOW

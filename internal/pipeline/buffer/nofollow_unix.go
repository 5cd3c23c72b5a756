//go:build unix

package buffer

import "syscall"

// oNoFollow makes an open fail on a symlink: a file planted in the buffer
// directory by another user is never written or read through.
const oNoFollow = syscall.O_NOFOLLOW

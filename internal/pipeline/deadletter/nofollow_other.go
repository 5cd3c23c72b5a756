//go:build !unix

package deadletter

// oNoFollow: no O_NOFOLLOW on this platform.
const oNoFollow = 0

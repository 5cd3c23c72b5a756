//go:build !unix

package buffer

// oNoFollow: no O_NOFOLLOW on this platform.
const oNoFollow = 0

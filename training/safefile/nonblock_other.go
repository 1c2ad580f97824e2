//go:build !unix

package safefile

// nonblock is not needed where named pipes cannot be opened by path.
const nonblock = 0

package plugins

// WithAfterPin returns o with f run between the checksum check of every
// start and the exec, so that a test can swap the file in that window.
func WithAfterPin(o Options, f func()) Options {
	o.afterPin = f
	return o
}

// CheckNow asks the supervisor to probe the plugin now.
func (c *Client) CheckNow() { c.check() }

// KillGroup is killGroup, for tests.
func KillGroup(pid int) { killGroup(pid) }
